"""Logs and metrics shared by every spectral process."""
