"""The transport the settings name (``SPECTRAL_KAFKA_TRANSPORT``), for whoever reads or produces
through the seam: the consumer engine, ``dlq redrive``."""

from __future__ import annotations

from spectral.kafka.aiokafka_source import AiokafkaTransport
from spectral.kafka.transport import Transport
from spectral.settings import KafkaTransport, Settings


def configured_transport(settings: Settings, bootstrap: str) -> Transport:
    """The transport of the settings (``SPECTRAL_KAFKA_TRANSPORT``) on the cluster
    ``bootstrap``."""
    if settings.kafka_transport is KafkaTransport.CONFLUENT:
        from spectral.kafka.confluent import ConfluentTransport  # noqa: PLC0415 - librdkafka only when chosen

        return ConfluentTransport(settings, bootstrap)
    return AiokafkaTransport(settings, bootstrap)
