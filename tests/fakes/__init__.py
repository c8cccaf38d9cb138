"""Test doubles that speak real protocols (an OpenAI-compatible HTTP server on loopback)."""
