"""Liveness and readiness of a long-running process, shared by every command and the HTTP API.

* **Live** (``/healthz``): the event loop made progress recently. :meth:`Health.heartbeat` is a
  task that stamps the time twice a second; a loop wedged by a blocking call (or a process frozen
  with SIGSTOP) stops stamping, and after ``liveness_timeout`` seconds the process is reported
  dead. The answer comes from a thread that does not need the loop, so a wedged loop cannot hide.
* **Ready** (``/readyz``): live, and every named check passes — "joined its consumer group",
  "holds its relay shards", "database reachable", "Kafka reachable". Components set their checks
  as their state changes (:meth:`Health.set_check`); probes (:meth:`Health.probe`) run on tasks
  of their own, started by the heartbeat every ``probe_interval`` seconds (never awaited by it:
  a probe stuck on a frozen server cannot stop the heartbeat), and a probe that has not reported
  for ``3 * probe_interval`` counts as failed.
* **Bounded calls**: a component wraps a call that may block for as long as a server lets it
  (a publish the idempotent producer retries, a statement) in :meth:`Health.call`; while such a
  call has not returned within ``call_timeout`` seconds its check fails. So readiness never
  waits on the call it judges: it is read from the clock.

Readiness is exported as metrics on the same endpoint (:meth:`Health.collector`):
``spectral_ready`` (1 when /readyz answers 200), ``spectral_ready_check{check}`` and
``spectral_live``. The heartbeat logs the changes of the answer: one WARNING ``not ready`` line
naming the failing checks, one INFO ``ready`` line when it passes again. Probes named after a
server (``database``, ``kafka``) also report to the process's outages (outages.py).

Everything here is thread-safe: the loop writes, the HTTP thread reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from spectral.faults import Component, describe
from spectral.observability.logging import get_logger
from spectral.observability.outages import OUTAGES, Outages

log = get_logger(__name__)

Probe = Callable[[], Awaitable[object]]
"""An async check: returns when healthy, raises (or times out) when not."""

PROBE_TIMEOUT: Final = 5.0
BEAT_SECONDS: Final = 0.5
SERVERS: Final = frozenset(Component)
"""Check names that are servers: their probes report outages too."""


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str
    at: float


@dataclass(frozen=True)
class _Call:
    check: str
    what: str
    started: float


class Health:
    """The liveness stamp and the readiness checks of one process."""

    def __init__(
        self,
        *,
        liveness_timeout: float = 30.0,
        probe_interval: float = 5.0,
        call_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        outages: Outages = OUTAGES,
    ) -> None:
        self.liveness_timeout = liveness_timeout
        self.probe_interval = probe_interval
        self.call_timeout = call_timeout
        self._clock = clock
        self._outages = outages
        self._lock = threading.Lock()
        self._beat: float | None = None
        self._checks: dict[str, Check] = {}
        self._probes: dict[str, Probe] = {}
        self._probing: dict[str, asyncio.Task[None]] = {}
        self._probe_due: dict[str, float] = {}
        self._calls: dict[int, _Call] = {}
        self._tokens = itertools.count()
        self._answer: bool | None = None

    # -- written by the process -----------------------------------------------------------------

    def beat(self) -> None:
        with self._lock:
            self._beat = self._clock()

    def set_check(self, name: str, ok: bool, detail: str = "") -> None:
        """Record the state of check ``name`` (e.g. ``group``, ``shards``)."""
        with self._lock:
            self._checks[name] = Check(ok, detail, self._clock())

    def probe(self, name: str, probe: Probe) -> None:
        """Run ``probe`` every ``probe_interval`` seconds (started by :meth:`heartbeat`) as
        check ``name``; until it first answers the check fails."""
        self._probes[name] = probe
        self._probe_due[name] = 0.0
        self.set_check(name, ok=False, detail="not probed yet")

    def forget(self, name: str) -> None:
        with self._lock:
            self._checks.pop(name, None)
        self._probes.pop(name, None)
        self._probe_due.pop(name, None)
        task = self._probing.pop(name, None)
        if task is not None:
            task.cancel()

    @contextlib.contextmanager
    def call(self, check: str, what: str) -> Iterator[None]:
        """``with health.call("kafka", "publish"):`` — while the block has not finished within
        ``call_timeout`` seconds, check ``check`` fails (``publish not answered for 12 s``)."""
        token = next(self._tokens)
        with self._lock:
            self._calls[token] = _Call(check, what, self._clock())
        try:
            yield
        finally:
            with self._lock:
                self._calls.pop(token, None)

    async def heartbeat(self) -> None:
        """Stamp liveness, start the probes that are due, log changes of readiness; runs until
        cancelled (and cancels the probes in flight with it)."""
        try:
            while True:
                self.beat()
                self._start_due_probes()
                self._log_change()
                await asyncio.sleep(min(BEAT_SECONDS, self.liveness_timeout / 4))
        finally:
            for task in self._probing.values():
                task.cancel()
            self._probing.clear()

    def _start_due_probes(self) -> None:
        now = self._clock()
        for name, probe in list(self._probes.items()):
            running = self._probing.get(name)
            if (running is not None and not running.done()) or now < self._probe_due[name]:
                continue
            self._probe_due[name] = now + self.probe_interval
            self._probing[name] = asyncio.create_task(self._run_probe(name, probe), name=name)

    async def _run_probe(self, name: str, probe: Probe) -> None:
        try:
            await asyncio.wait_for(probe(), timeout=PROBE_TIMEOUT)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
            if name not in self._probes:
                return  # forgotten meanwhile
            self.set_check(name, ok=False, detail=describe(exc))
            if name in SERVERS:
                self._outages.failed(name, exc, what="readiness probe")
        else:
            if name not in self._probes:
                return
            self.set_check(name, ok=True)
            if name in SERVERS:
                self._outages.recovered(name)

    def _log_change(self) -> None:
        ok, body = self.ready()
        if not body.get("checks") and body["status"] != "stalled":
            return  # nothing is judged (not started yet, or every check retired at a clean end)
        previous, self._answer = self._answer, ok
        if ok == previous or (previous is None and not ok):
            return  # no change (starting up, not ready yet, is no news either)
        if ok:
            log.info("ready")
            return
        failing = {
            name: check["detail"] for name, check in body["checks"].items() if not check["ok"]
        }
        log.warning("not ready", failing=failing or {"loop": body["status"]})

    # -- read by the HTTP thread ----------------------------------------------------------------

    def live(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            beat = self._beat
        if beat is None:
            return False, {"status": "starting", "loop": "no heartbeat yet"}
        age = self._clock() - beat
        ok = age <= self.liveness_timeout
        return ok, {
            "status": "ok" if ok else "stalled",
            "loop_heartbeat_age_seconds": round(age, 3),
            "liveness_timeout_seconds": self.liveness_timeout,
        }

    def ready(self) -> tuple[bool, dict[str, Any]]:
        live, body = self.live()
        now = self._clock()
        with self._lock:
            checks = dict(self._checks)
            calls = list(self._calls.values())
        overdue: dict[str, _Call] = {}
        for call in calls:
            if now - call.started > self.call_timeout:
                oldest = overdue.get(call.check)
                if oldest is None or call.started < oldest.started:
                    overdue[call.check] = call
        report: dict[str, Any] = {}
        ready = live and bool(checks)
        for name in sorted({*checks, *overdue}):
            check = checks.get(name)
            at = check.at if check is not None else now
            stale = name in self._probes and now - at > 3 * self.probe_interval
            late = overdue.get(name)
            ok = check is not None and check.ok and not stale and late is None
            ready = ready and ok
            if late is not None:
                detail = f"{late.what} not answered for {now - late.started:.0f} s"
            elif stale:
                detail = "probe overdue"
            else:
                detail = check.detail if check is not None else ""
            report[name] = {"ok": ok, "detail": detail, "age_seconds": round(now - at, 3)}
        body = {**body, "status": "ready" if ready else "not_ready", "checks": report}
        return ready, body

    def collector(self) -> CollectorRegistry:
        """A registry exporting this process's readiness (see the module docstring), read at
        scrape time from the clock, never from the event loop."""
        registry = CollectorRegistry()
        ReadinessMetrics(registry, self)
        return registry


class ReadinessMetrics:
    """``spectral_live``, ``spectral_ready`` and ``spectral_ready_check{check}`` on
    ``registry``, read from ``health`` at scrape time."""

    def __init__(self, registry: CollectorRegistry, health: Health | None = None) -> None:
        registry.register(_ReadinessCollector(health or Health()))


class _ReadinessCollector(Collector):
    def __init__(self, health: Health) -> None:
        self._health = health

    def collect(self) -> Iterator[GaugeMetricFamily]:
        live, _ = self._health.live()
        ready, body = self._health.ready()
        yield GaugeMetricFamily(
            "spectral_live", "1 while the event loop makes progress (/healthz).", value=int(live)
        )
        yield GaugeMetricFamily(
            "spectral_ready",
            "1 while the process is live and every readiness check passes (/readyz).",
            value=int(ready),
        )
        checks = GaugeMetricFamily(
            "spectral_ready_check",
            "1 while the named readiness check passes (a server reachable, a group joined, "
            "shards held; a call unanswered past its bound fails its check).",
            labels=["check"],
        )
        for name, check in body["checks"].items():
            checks.add_metric([name], int(check["ok"]))
        yield checks


async def run_with_health(health: Health | None, main: Awaitable[Any]) -> Any:
    """Await ``main`` with ``health``'s heartbeat running beside it (stopped afterwards)."""
    if health is None:
        return await main
    beating = asyncio.create_task(health.heartbeat(), name="health-heartbeat")
    try:
        return await main
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating


class HealthASGI:
    """An ASGI app answering ``/healthz`` and ``/readyz`` from ``health`` in front of ``app``
    (the HTTP API, MCP over HTTP): no authentication, not in the OpenAPI document, and so
    without the checks' error texts (which name hosts, ports and logins; the metrics port, an
    operators' interface, and the log keep them). The heartbeat starts with the server's
    lifespan, on its event loop, so a wedged loop stops answering here and turns ``/healthz``
    red on the metrics port."""

    def __init__(self, app: Any, health: Health, *, beats: bool = True) -> None:
        self.app = app
        self.health = health
        self._beats = beats
        """Start the heartbeat with the lifespan (False: the process runs it already)."""
        self._heartbeat: asyncio.Task[None] | None = None

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" and self._beats and self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self.health.heartbeat(), name="health")
        if scope["type"] == "http" and scope.get("path") in {"/healthz", "/readyz"}:
            ok, body = self.health.live() if scope["path"] == "/healthz" else self.health.ready()
            for check in body.get("checks", {}).values():
                check.pop("detail", None)  # error text names hosts and ports: not for anyone
            payload = json.dumps(body, sort_keys=True).encode()
            headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
            await send(
                {"type": "http.response.start", "status": 200 if ok else 503, "headers": headers}
            )
            await send({"type": "http.response.body", "body": payload})
            return
        await self.app(scope, receive, send)
