"""deploy-tracker: an example spectral plugin (see README.md)."""
