"""The network surfaces' settings section (``spectral api``, ``spectral mcp``): which peers may
speak for a client through forwarded headers, and the key that signs pagination cursors."""

from __future__ import annotations

from pydantic import Field, SecretStr

from spectral.settings import PluginSettings


class ApiSettings(PluginSettings):
    """How the HTTP API and the web console treat proxies and cursors (spectral/api)."""

    forwarded_allow_ips: str = Field(
        default="127.0.0.1",
        description="Comma-separated addresses or networks (CIDR) of the reverse proxies whose "
        "X-Forwarded-For, X-Forwarded-Proto and X-Forwarded-Host are believed (as uvicorn's "
        "FORWARDED_ALLOW_IPS); `*` trusts every peer (only behind a proxy that strips what "
        "clients send). From any other peer these headers are dropped before the app sees them.",
    )
    cursor_key: SecretStr | None = Field(
        default=None,
        description="Signs pagination cursors (HMAC-SHA-256; at least 16 bytes of UTF-8). "
        "Unset: the key made at random by the migrations (core.surface_keys), which every "
        "replica reads. Changing it invalidates the cursors handed out.",
    )
