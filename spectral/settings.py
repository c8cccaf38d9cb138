"""Settings: one object built from ``SPECTRAL_*`` environment variables.

Secrets (the database URL carries a password, the SASL password) are ``SecretStr`` so they never
appear in a repr, a log line or a traceback. ``describe()`` gives a printable view with them masked.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spectral"


class Settings(BaseSettings):
    """Everything a spectral process reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="SPECTRAL_", frozen=True, extra="ignore")

    kafka_bootstrap: str | None = Field(
        default=None,
        description="host:port[,host:port]; unset = the local stack (`spectral dev up`).",
    )
    kafka_security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    kafka_sasl_mechanism: SaslMechanism | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ca_file: Path | None = None
    database_url: SecretStr | None = Field(
        default=None,
        description="postgresql://user:password@host:port/db; unset = the local stack.",
    )
    operator_database_url: SecretStr | None = Field(
        default=None,
        description="Login used by `spectral triage` (operator role); unset = database_url "
        "with the spectral_operator role assumed.",
    )
    topic_prefix: str = Field(default="", description="Prepended to every topic name.")
    state_dir: Path = Field(default=Path(".spectral"), description="Local stack state.")
    cache_dir: Path = Field(default_factory=_default_cache_dir, description="Kafka jars cache.")
    log_level: str = "INFO"
    log_format: str = Field(default="auto", description="auto | json | console")

    @field_validator("topic_prefix")
    @classmethod
    def _topic_prefix_is_legal(cls, value: str) -> str:
        allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        if not set(value) <= allowed:
            raise ValueError("topic_prefix may contain only letters, digits, '.', '_' and '-'")
        return value

    def describe(self) -> dict[str, Any]:
        """A printable view of the settings with every secret masked."""
        view = self.model_dump(mode="json")
        for name in ("database_url", "operator_database_url"):
            secret = getattr(self, name)
            view[name] = redact_url(secret.get_secret_value()) if secret else None
        if self.kafka_sasl_password is not None:
            view["kafka_sasl_password"] = "********"  # noqa: S105 - a mask, not a password
        return view


def redact_url(url: str) -> str:
    """Replace the password of a URL with asterisks."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":********"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment, with explicit overrides winning."""
    return Settings(**overrides)
