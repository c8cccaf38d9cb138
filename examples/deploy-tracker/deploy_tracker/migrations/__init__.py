"""The plugin's migration track (``spectral.migrations``), numbered apart from spectral's."""
