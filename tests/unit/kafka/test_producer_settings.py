"""Every producer spectral owns is built from ``producer_kwargs``: acks=all, idempotence, the
request timeout (the producers of dead letters and redriven records from
``refusable_producer_kwargs``: the same without idempotence). (tests/cluster/test_producer_acks.py
shows what that buys on a real cluster.)"""

from __future__ import annotations

import ast
from pathlib import Path

from spectral.kafka.config import client_kwargs, producer_kwargs, refusable_producer_kwargs
from spectral.settings import load_settings

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("spectral", "producers", "consumers")


def test_producer_kwargs_ask_for_every_in_sync_replica_and_idempotence() -> None:
    settings = load_settings(kafka_request_timeout_ms=12_345, kafka_security_protocol="SSL")
    kwargs = producer_kwargs(settings, "a:1,b:2")
    assert kwargs["acks"] == "all"
    assert kwargs["enable_idempotence"] is True
    assert kwargs["request_timeout_ms"] == 12_345
    assert kwargs["bootstrap_servers"] == "a:1,b:2"
    assert kwargs["security_protocol"] == "SSL"
    assert "ssl_context" in kwargs


def test_every_client_waits_fifteen_seconds_for_an_answer_by_default() -> None:
    assert client_kwargs(load_settings(), "a:1")["request_timeout_ms"] == 15_000


def _producer_calls() -> list[tuple[str, ast.Call]]:
    calls: list[tuple[str, ast.Call]] = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            calls.extend(
                (f"{path.relative_to(ROOT)}:{node.lineno}", node)
                for node in ast.walk(tree)
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name | ast.Attribute)
                and (getattr(node.func, "id", None) or getattr(node.func, "attr", None))
                == "AIOKafkaProducer"
            )
    return calls


def test_producers_of_refusable_records_keep_every_replica_but_not_idempotence() -> None:
    settings = load_settings(kafka_request_timeout_ms=12_345)
    kwargs = refusable_producer_kwargs(settings, "127.0.0.1:9092")
    assert kwargs["acks"] == "all"
    assert kwargs["enable_idempotence"] is False
    assert {k: v for k, v in kwargs.items() if k != "enable_idempotence"} == {
        k: v
        for k, v in producer_kwargs(settings, "127.0.0.1:9092").items()
        if k != "enable_idempotence"
    }


def test_every_producer_in_the_product_is_built_from_producer_kwargs() -> None:
    calls = _producer_calls()
    # the outbox relay; the aiokafka sender (the consumer's dead letters and dlq redrive)
    assert len(calls) >= 2
    for where, call in calls:
        starred = [
            kw.value for kw in call.keywords if kw.arg is None and isinstance(kw.value, ast.Call)
        ]
        names = {getattr(c.func, "id", None) for c in starred}
        # Dead letters and redriven records: the same, minus idempotence (see config.py).
        built = names & {"producer_kwargs", "refusable_producer_kwargs"}
        assert built, f"{where}: AIOKafkaProducer without producer_kwargs"
        overridden = {kw.arg for kw in call.keywords} & {"acks", "enable_idempotence"}
        assert not overridden, f"{where} overrides {overridden}"


def test_the_confluent_relay_producer_asks_for_every_replica_idempotence_and_murmur2() -> None:
    from spectral.kafka.confluent import ConfluentPublisher  # noqa: PLC0415 - librdkafka

    settings = load_settings(kafka_request_timeout_ms=12_345)
    publisher = ConfluentPublisher(
        settings,
        "a:1",
        client_id="relay",
        linger_ms=5,
        max_batch_bytes=1 << 20,
        max_request_bytes=1 << 20,
    )
    config = publisher._config
    assert config["acks"] == "all"
    assert config["enable.idempotence"] is True
    assert config["partitioner"] == "murmur2_random"
    assert config["request.timeout.ms"] == 12_345
