"""Client keyword arguments (bootstrap and security) shared by every aiokafka client, and the
delivery guarantee every producer spectral owns shares."""

from __future__ import annotations

import ssl
from typing import Any

from spectral.settings import SecurityProtocol, Settings


def client_kwargs(settings: Settings, bootstrap: str) -> dict[str, Any]:
    """aiokafka keyword arguments for ``bootstrap`` with the settings' security options and
    request timeout.

    ``request_timeout_ms`` (``SPECTRAL_KAFKA_REQUEST_TIMEOUT_MS``, 15 s instead of aiokafka's
    40 s): a broker that stops answering without closing its connections (frozen: SIGSTOP, a
    long GC or VM pause) holds a request only this long; then the client drops the connection
    and asks the cluster again, which moved the broker's leaderships and group coordination
    elsewhere once its session expired (seconds). Measured on a 3-broker cluster with a
    broker frozen for 50 s: with 40 s the relay stalled 40 s and the consumer whose group the
    broker coordinated stalled for the whole 50 s; with 15 s the relay stalls 15-30 s
    (docs/explanation/replication-and-delivery.md). It stays above the consumer group's rebalance
    timeout (aiokafka: the 10 s session timeout), the longest a broker may rightly hold a JoinGroup
    request."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "security_protocol": settings.kafka_security_protocol.value,
        "request_timeout_ms": settings.kafka_request_timeout_ms,
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


def producer_kwargs(settings: Settings, bootstrap: str) -> dict[str, Any]:
    """aiokafka keyword arguments of every producer spectral owns (the outbox relay, the
    consumer's dead letters, ``dlq redrive``): ``client_kwargs`` plus

    * ``acks="all"``: a send is acknowledged only once every in-sync replica has the record,
      and the broker refuses it (NOT_ENOUGH_REPLICAS, retried by the client) while fewer than
      the topic's ``min.insync.replicas`` are in sync — so with 3 replicas and
      ``min.insync.replicas=2`` an acknowledged record survives the loss of any one broker, and
      a record is never acknowledged with a single copy;
    * ``enable_idempotence=True``: the client's retries (a leader that failed over, a
      connection that broke after the write) never write a record twice nor out of order
      within a partition.

    Callers add only throughput and size options (``linger_ms``, ``max_request_size``)."""
    return {**client_kwargs(settings, bootstrap), "acks": "all", "enable_idempotence": True}


def refusable_producer_kwargs(
    settings: Settings, bootstrap: str, *, delivery_timeout_ms: int | None = None
) -> dict[str, Any]:
    """``producer_kwargs`` for producers of records the broker may refuse one by one — dead
    letters and redriven records, whose content is not spectral's to choose — minus idempotence:
    once the broker refuses one record for good (``MessageSizeTooLarge``), an idempotent aiokafka
    producer fails every later record of that partition with ``OutOfOrderSequenceNumber``.
    ``acks="all"`` stays (acknowledged only with ``min.insync.replicas`` copies); a client retry
    may write a record twice, which costs one more dead letter of the same record, or a
    redriven record the consumer deduplicates."""
    kwargs = {**producer_kwargs(settings, bootstrap), "enable_idempotence": False}
    if delivery_timeout_ms is not None:
        # aiokafka's delivery window is its request timeout (a batch expires after it): a
        # longer one lets a command wait out a partition below min.insync.replicas, retrying
        # every half second instead of every 100 ms.
        kwargs["request_timeout_ms"] = max(kwargs["request_timeout_ms"], delivery_timeout_ms)
        kwargs["retry_backoff_ms"] = 500
    return kwargs
