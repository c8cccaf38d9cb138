"""librdkafka's client-wide errors take the client lines' road: a broker that is down is
reported dozens of times a second per client, and only the first lines of the outage are
written (the rest counted), as aiokafka's are; a fatal error always is."""

from __future__ import annotations

import io
import json

from confluent_kafka import KafkaError

from spectral.kafka.confluent import _log_error
from spectral.observability.logging import configure_logging


def _logged(*errors: KafkaError) -> list[dict[str, object]]:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    try:
        for error in errors:
            _log_error(error)
    finally:
        configure_logging("INFO", "console")
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_broker_down_is_written_once_not_for_every_report() -> None:
    down = KafkaError(KafkaError._TRANSPORT, "127.0.0.1:9/bootstrap: Connect failed")
    lines = _logged(*[down] * 200)
    assert len(lines) == 1
    assert lines[0]["logger"] == "kafka.librdkafka"
    assert "_TRANSPORT" in str(lines[0]["event"])


def test_a_fatal_error_is_always_written() -> None:
    fatal = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    lines = _logged(fatal, fatal)
    assert len(lines) == 2
    assert all(line["level"] == "error" for line in lines)
