"""spectral: the runtime shared by producers and consumers."""

__version__ = "0.1.0"
