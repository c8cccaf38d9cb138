"""One exception hierarchy for the whole runtime.

`TransientError` means "try again later" (a database or broker that does not answer);
`PermanentError` means retrying cannot help (bad data, bad configuration). Adapters translate
driver exceptions into these with ``raise ... from exc`` so callers never see driver types.
"""

from __future__ import annotations


class SpectralError(Exception):
    """Base of every error spectral raises on purpose."""


class TransientError(SpectralError):
    """An infrastructure fault: pause, back off and retry; never dead-letter because of it."""


class PermanentError(SpectralError):
    """Retrying will not help: the input or the configuration is wrong."""


class ConfigurationError(PermanentError):
    """The environment is not set up; the message says what to do about it."""
