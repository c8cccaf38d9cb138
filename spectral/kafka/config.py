"""Client keyword arguments (bootstrap and security) shared by every aiokafka client."""

from __future__ import annotations

import ssl
from typing import Any

from spectral.settings import SecurityProtocol, Settings


def client_kwargs(settings: Settings, bootstrap: str) -> dict[str, Any]:
    """aiokafka keyword arguments for ``bootstrap`` with the settings' security options."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "security_protocol": settings.kafka_security_protocol.value,
    }
    if settings.kafka_security_protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        context = ssl.create_default_context(
            cafile=str(settings.kafka_ca_file) if settings.kafka_ca_file else None
        )
        kwargs["ssl_context"] = context
    if settings.kafka_sasl_mechanism is not None:
        kwargs["sasl_mechanism"] = settings.kafka_sasl_mechanism.value
        kwargs["sasl_plain_username"] = settings.kafka_sasl_username
        kwargs["sasl_plain_password"] = (
            settings.kafka_sasl_password.get_secret_value()
            if settings.kafka_sasl_password
            else None
        )
    return kwargs
