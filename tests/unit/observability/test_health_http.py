"""The --metrics-port endpoint: /metrics, real /healthz and /readyz, 404 elsewhere; the API's
health endpoints in front of the app; every log line JSON with secrets masked."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import socket

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry, Counter

from spectral.db.migrate import discover
from spectral.errors import ConfigurationError
from spectral.observability.health import Health, HealthASGI
from spectral.observability.logging import configure_logging
from spectral.observability.metrics import serve_metrics


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_endpoints_answer_for_real() -> None:
    registry = CollectorRegistry()
    Counter("probe_total", "a test counter", registry=registry).inc()
    clock = [100.0]
    health = Health(liveness_timeout=10, clock=lambda: clock[0])
    port = _port()
    server = serve_metrics(port, registry, health=health)
    assert server is not None
    base = f"http://127.0.0.1:{port}"
    try:
        assert "probe_total 1.0" in httpx.get(f"{base}/metrics").text
        assert httpx.get(f"{base}/").status_code == 404
        assert httpx.get(f"{base}/anything").status_code == 404
        assert httpx.get(f"{base}/healthz").status_code == 503  # no heartbeat yet
        health.beat()
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/readyz").status_code == 503  # no check reported yet
        health.set_check("group", ok=True, detail="3 partitions")
        health.set_check("database", ok=False, detail="connection refused")
        body = httpx.get(f"{base}/readyz")
        assert body.status_code == 503
        assert body.json()["checks"]["database"]["detail"] == "connection refused"
        health.set_check("database", ok=True)
        assert httpx.get(f"{base}/readyz").status_code == 200
        clock[0] += 11  # the loop stopped stamping: dead, and so not ready
        assert httpx.get(f"{base}/healthz").status_code == 503
        assert httpx.get(f"{base}/readyz").status_code == 503
    finally:
        server.shutdown()
        server.server_close()


def test_the_metrics_host_is_configurable() -> None:
    port = _port()
    server = serve_metrics(port, CollectorRegistry(), addr="0.0.0.0")  # noqa: S104 - the point
    assert server is not None
    try:
        assert server.server_address[0] == "0.0.0.0"  # noqa: S104
    finally:
        server.shutdown()
        server.server_close()


async def test_the_api_answers_health_in_front_of_the_app() -> None:
    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        raise AssertionError("health requests never reach the app")

    health = Health(liveness_timeout=5)
    health.beat()
    health.set_check("database", ok=True)
    transport = httpx.ASGITransport(app=HealthASGI(app, health))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).json()["status"] == "ready"
        internal = "ConnectionRefusedError: Connect call failed ('10.3.0.7', 5432)"
        health.set_check("database", ok=False, detail=internal)
        refused = await client.get("/readyz")
        assert refused.status_code == 503
        # The API's port answers anyone: it names the failing check, never the error text (hosts,
        # ports, logins), which the metrics port's /readyz and the log keep for operators.
        assert refused.json()["checks"]["database"]["ok"] is False
        assert "10.3.0.7" not in refused.text
        assert "5432" not in refused.text


def test_every_log_line_is_json_and_masked() -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    try:
        logging.getLogger("aiokafka.cluster").error(
            "Topic %s not reachable via postgresql://user:canary-secret@db/x", "t"
        )
        logging.getLogger("asyncpg.pool").warning("connection lost")
        import structlog  # noqa: PLC0415

        structlog.get_logger("spectral.test").info("own line", password="canary-secret")  # noqa: S106 - a canary
    finally:
        configure_logging("INFO", "console")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    parsed = [json.loads(line) for line in lines]
    assert parsed[0]["logger"] == "aiokafka.cluster"
    assert parsed[0]["level"] == "error"
    assert {"timestamp", "level", "event"} <= set(parsed[1])
    assert "canary-secret" not in out.getvalue()


def test_no_migrations_is_an_error_not_an_empty_schema(tmp_path: pytest.TempPathFactory) -> None:
    with pytest.raises(ConfigurationError, match="no migrations"):
        discover(tmp_path)  # type: ignore[arg-type]


def test_a_blocked_loop_is_not_live() -> None:
    async def scenario() -> tuple[bool, bool]:
        health = Health(liveness_timeout=0.2)
        task = asyncio.create_task(health.heartbeat())
        await asyncio.sleep(0.05)
        before = health.live()[0]
        import time  # noqa: PLC0415

        time.sleep(0.4)
        after = health.live()[0]
        task.cancel()
        return before, after

    assert asyncio.run(scenario()) == (True, False)


def test_a_silent_connection_does_not_hold_the_endpoint_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that connects and sends nothing is dropped after the handler's timeout."""
    from spectral.observability import metrics  # noqa: PLC0415

    assert metrics._Handler.timeout is not None
    monkeypatch.setattr(metrics._Handler, "timeout", 0.5)
    port = _port()
    server = serve_metrics(port, CollectorRegistry())
    assert server is not None
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
            silent.sendall(b"GET /metr")  # and nothing more
            assert silent.recv(1024) == b""  # closed by the server, well before 10 s
    finally:
        server.shutdown()
        server.server_close()


async def test_a_stuck_probe_never_stops_the_heartbeat() -> None:
    """A probe waits on a frozen server for up to its timeout: on a task of its own, so the
    heartbeat keeps stamping meanwhile and a stuck probe is a failed check, not a dead loop."""
    stuck = asyncio.Event()

    async def frozen_server() -> None:
        stuck.set()
        await asyncio.Event().wait()

    health = Health(liveness_timeout=0.4, probe_interval=0.05)
    health.probe("database", frozen_server)
    task = asyncio.create_task(health.heartbeat())
    try:
        await asyncio.wait_for(stuck.wait(), 5)
        for _ in range(10):
            await asyncio.sleep(0.1)
            assert health.live()[0]
        ok, body = health.ready()
        assert not ok
        assert body["checks"]["database"]["detail"] in {"not probed yet", "probe overdue"}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_a_call_unanswered_past_its_bound_fails_its_check() -> None:
    clock = [0.0]
    health = Health(call_timeout=10, clock=lambda: clock[0])
    health.beat()
    health.set_check("kafka", ok=True)
    with health.call("kafka", "publish"):
        clock[0] = 9.0
        health.beat()
        assert health.ready()[0]
        clock[0] = 12.0
        health.beat()
        ok, body = health.ready()
        assert not ok
        assert body["checks"]["kafka"] == {
            "ok": False,
            "detail": "publish not answered for 12 s",
            "age_seconds": 12.0,
        }
    assert health.ready()[0]  # answered (however late): the check is its own again
    with health.call("database", "a statement"):  # a check nobody set yet fails as well
        clock[0] = 30.0
        health.beat()
        assert health.ready()[1]["checks"]["database"]["ok"] is False


def test_readiness_is_exported_as_metrics() -> None:
    health = Health()
    port = _port()
    server = serve_metrics(port, CollectorRegistry(), health=health)
    assert server is not None
    try:
        health.beat()
        health.set_check("kafka", ok=False, detail="refused")
        health.set_check("database", ok=True)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert "spectral_live 1.0" in text
        assert "spectral_ready 0.0" in text
        assert 'spectral_ready_check{check="kafka"} 0.0' in text
        assert 'spectral_ready_check{check="database"} 1.0' in text
        health.set_check("kafka", ok=True)
        assert "spectral_ready 1.0" in httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        server.shutdown()
        server.server_close()


async def test_readiness_changes_are_logged_once_each() -> None:
    health = Health(probe_interval=3600)
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(health.heartbeat())
        try:
            await asyncio.sleep(0.05)  # starting, not ready: no news
            health.set_check("kafka", ok=True)
            await asyncio.sleep(0.6)
            for _ in range(3):
                health.set_check("kafka", ok=False, detail="refused")
                await asyncio.sleep(0.6)
            health.set_check("kafka", ok=True)
            await asyncio.sleep(0.6)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    events = [(line["event"], line.get("failing")) for line in logs]
    assert events == [("ready", None), ("not ready", {"kafka": "refused"}), ("ready", None)]
