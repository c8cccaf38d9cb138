"""Kafka's compression codecs: every one must be readable, whatever a producer chose.

aiokafka decodes gzip with the standard library and snappy, lz4 and zstd with ``cramjam`` (a
dependency of spectral for exactly this: franz-go's default is snappy, librdkafka's and the Java
client's are configurable). Without it a compressed batch cannot be read at all, so a process
that consumes refuses to start instead of failing on the first such batch.
"""

from __future__ import annotations

from aiokafka import codec

from spectral.errors import ConfigurationError


def missing_codecs() -> list[str]:
    """The Kafka codecs this process cannot decode (normally none)."""
    checks = {
        "gzip": codec.has_gzip,
        "snappy": codec.has_snappy,
        "lz4": codec.has_lz4,
        "zstd": codec.has_zstd,
    }
    return [name for name, available in checks.items() if not available()]


def require_codecs() -> None:
    """Raise ConfigurationError naming the codecs that cannot be decoded, if any."""
    missing = missing_codecs()
    if missing:
        raise ConfigurationError(
            f"Kafka compression codecs {', '.join(missing)} cannot be decoded: the cramjam "
            "package is missing (install spectral with its dependencies)"
        )
