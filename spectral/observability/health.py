"""Liveness and readiness of a long-running process, shared by every command and the HTTP API.

* **Live** (``/healthz``): the event loop made progress recently. :meth:`Health.heartbeat` is a
  task that stamps the time every second; a loop wedged by a blocking call (or a process frozen
  with SIGSTOP) stops stamping, and after ``stall_after`` seconds the process is reported dead.
  The answer comes from a thread that does not need the loop, so a wedged loop cannot hide.
* **Ready** (``/readyz``): live, and every named check passes — "joined its consumer group",
  "holds its relay shards", "database reachable", "Kafka reachable". Components set their checks
  as their state changes (:meth:`Health.set_check`); probes (:meth:`Health.probe`) are run by the
  heartbeat task every ``probe_interval`` seconds, and a probe that has not reported for
  ``3 * probe_interval`` counts as failed.

Everything here is thread-safe: the loop writes, the HTTP thread reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from spectral.observability.logging import get_logger

log = get_logger(__name__)

Probe = Callable[[], Awaitable[object]]
"""An async check: returns when healthy, raises (or times out) when not."""

PROBE_TIMEOUT = 5.0


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str
    at: float


class Health:
    """The liveness stamp and the readiness checks of one process."""

    def __init__(
        self,
        *,
        stall_after: float = 30.0,
        probe_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stall_after = stall_after
        self.probe_interval = probe_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._beat: float | None = None
        self._checks: dict[str, Check] = {}
        self._probes: dict[str, Probe] = {}
        self._probe_now = False

    # -- written by the process -----------------------------------------------------------------

    def beat(self) -> None:
        with self._lock:
            self._beat = self._clock()

    def set_check(self, name: str, ok: bool, detail: str = "") -> None:
        """Record the state of check ``name`` (e.g. ``group``, ``shards``)."""
        with self._lock:
            previous = self._checks.get(name)
            self._checks[name] = Check(ok, detail, self._clock())
        if previous is not None and previous.ok != ok:
            log.info("readiness changed", check=name, ok=ok, detail=detail)

    def probe(self, name: str, probe: Probe) -> None:
        """Run ``probe`` every ``probe_interval`` seconds (from :meth:`heartbeat`) as check
        ``name``; until it first answers the check fails."""
        self._probes[name] = probe
        self._probe_now = True
        self.set_check(name, ok=False, detail="not probed yet")

    def forget(self, name: str) -> None:
        with self._lock:
            self._checks.pop(name, None)
        self._probes.pop(name, None)

    async def heartbeat(self) -> None:
        """Stamp liveness every second and run the probes; runs until cancelled."""
        next_probe = 0.0
        while True:
            self.beat()
            if self._probe_now or self._clock() >= next_probe:
                self._probe_now = False
                await self._run_probes()
                next_probe = self._clock() + self.probe_interval
            await asyncio.sleep(min(0.5, self.stall_after / 4))

    async def _run_probes(self) -> None:
        async def one(name: str, probe: Probe) -> None:
            try:
                await asyncio.wait_for(probe(), timeout=PROBE_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
                self.set_check(name, ok=False, detail=f"{type(exc).__name__}: {exc}"[:300])
            else:
                self.set_check(name, ok=True)

        await asyncio.gather(*(one(name, probe) for name, probe in list(self._probes.items())))

    # -- read by the HTTP thread ----------------------------------------------------------------

    def live(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            beat = self._beat
        if beat is None:
            return False, {"status": "starting", "loop": "no heartbeat yet"}
        age = self._clock() - beat
        ok = age <= self.stall_after
        return ok, {
            "status": "ok" if ok else "stalled",
            "loop_heartbeat_age_seconds": round(age, 3),
            "stall_after_seconds": self.stall_after,
        }

    def ready(self) -> tuple[bool, dict[str, Any]]:
        live, body = self.live()
        now = self._clock()
        with self._lock:
            checks = dict(self._checks)
        report: dict[str, Any] = {}
        ready = live and bool(checks)
        for name, check in sorted(checks.items()):
            stale = name in self._probes and now - check.at > 3 * self.probe_interval
            ok = check.ok and not stale
            ready = ready and ok
            report[name] = {
                "ok": ok,
                "detail": "probe overdue" if stale else check.detail,
                "age_seconds": round(now - check.at, 3),
            }
        body = {**body, "status": "ready" if ready else "not_ready", "checks": report}
        return ready, body


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
    (the HTTP API): no authentication, not in the OpenAPI document, and so without the checks'
    error texts (which name hosts, ports and logins; the metrics port, an operators' interface,
    and the log keep them). The heartbeat starts with
    the server's lifespan, on its event loop, so a wedged loop stops answering here and turns
    ``/healthz`` red on the metrics port."""

    def __init__(self, app: Any, health: Health) -> None:
        self.app = app
        self.health = health
        self._heartbeat: asyncio.Task[None] | None = None

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" and self._heartbeat is None:
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
