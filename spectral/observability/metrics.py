"""The HTTP endpoint every long-running command exposes with ``--metrics-port``.

It serves, from a daemon thread (so it answers even when the event loop is wedged):

* ``/metrics`` — Prometheus exposition of the registry, and of the process's readiness
  (``spectral_ready``, ``spectral_ready_check{check}``, ``spectral_live``: health.py);
* ``/healthz`` — 200 while the event loop makes progress, 503 once it stalled (see health.py);
* ``/readyz`` — 200 when live and every readiness check passes, else 503, with a JSON body
  naming each check;
* 404 for anything else (a probe of a wrong path must not look healthy).

A one-shot command that nothing scrapes (``spectral maintenance`` as a CronJob) pushes its
series to a Pushgateway instead (:func:`push`, ``SPECTRAL_METRICS_PUSHGATEWAY``).

The interface is ``SPECTRAL_METRICS_HOST`` (default 127.0.0.1; 0.0.0.0 in a container, so the
scraper and the orchestrator's probes can reach it) or ``--metrics-host``.

:func:`per_member` makes a metric's series, one per member of the enum that bounds a label;
:class:`BatchHistogram` is a histogram observed a batch of values at a time.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    pushadd_to_gateway,
)
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from spectral.observability.health import Health
from spectral.observability.logging import get_logger

log = get_logger(__name__)

M = TypeVar("M", bound=MetricWrapperBase)
E = TypeVar("E", bound=Enum)


def per_member(metric: M, members: Iterable[E], *fixed: str) -> dict[E, M]:
    """The series of ``metric`` for each member of ``members`` (its value the last label's,
    after the ``fixed`` values of the labels before it), made now: every series is exported,
    at zero, from the start, and the label's values are the enum's, no other."""
    return {member: metric.labels(*fixed, member.value) for member in members}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    health: Health | None
    readiness: CollectorRegistry | None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10.0
    """Seconds a connection may take to send its request: a client that connects and sends
    nothing (or a byte now and then) would otherwise hold a thread of this server for ever."""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            exposition = generate_latest(self.server.registry)
            if self.server.readiness is not None:
                exposition += generate_latest(self.server.readiness)
            self._send(200, exposition, CONTENT_TYPE_LATEST)
        elif path in {"/healthz", "/readyz"}:
            health = self.server.health
            if health is None:
                ok, body = True, {"status": "ok", "detail": "no health tracking in this process"}
            else:
                ok, body = health.live() if path == "/healthz" else health.ready()
            payload = json.dumps(body, sort_keys=True).encode()
            self._send(200 if ok else 503, payload, "application/json")
        else:
            self._send(404, b"not found: /metrics, /healthz, /readyz\n", "text/plain")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        """Scrapes and probes are not worth a log line each."""


def listening(server: str, host: str, port: int, **extra: object) -> None:
    """The start-up line of a server (the API, MCP, a metrics endpoint): where it listens."""
    shown = f"[{host}]" if ":" in host else host
    log.info("listening", server=server, url=f"http://{shown}:{port}", **extra)


def serve_metrics(
    port: int | None,
    registry: CollectorRegistry = REGISTRY,
    addr: str = "127.0.0.1",
    health: Health | None = None,
) -> ThreadingHTTPServer | None:
    """Start the endpoint in a daemon thread; ``None`` or 0 means no endpoint."""
    if not port:
        return None
    server = _Server((addr, port), _Handler)
    server.registry = registry
    server.health = health
    server.readiness = health.collector() if health is not None else None
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


PUSH_TIMEOUT = 10.0
"""Seconds a push to the Pushgateway may take."""


class _Pushed(Collector):
    """The spectral_* families of a registry, but those left out."""

    def __init__(self, registry: CollectorRegistry, leave_out: Collection[str]) -> None:
        self._registry = registry
        self._leave_out = frozenset(leave_out)

    def collect(self) -> Iterable[Metric]:
        for family in self._registry.collect():
            if family.name.startswith("spectral_") and family.name not in self._leave_out:
                yield family


def push(
    gateway: str | None,
    job: str,
    registry: CollectorRegistry = REGISTRY,
    *,
    leave_out: Collection[str] = (),
) -> bool:
    """Push the ``spectral_*`` series of ``registry`` to the Pushgateway ``gateway`` under
    ``job`` (no-op when None), leaving out the families ``leave_out`` (so a failed pass keeps
    the last success's timestamp there). Series of the same names replace those the job pushed
    before, the others stay (a POST). A push that fails is logged, never raised: the command's
    outcome is its work's. Returns whether it was pushed."""
    if not gateway:
        return False
    pushed = CollectorRegistry(auto_describe=True)
    pushed.register(_Pushed(registry, leave_out))
    try:
        pushadd_to_gateway(gateway, job=job, registry=pushed, timeout=PUSH_TIMEOUT)
    except OSError as exc:
        log.warning("metrics not pushed", gateway=gateway, job=job, error=str(exc)[:300])
        return False
    log.info("metrics pushed", gateway=gateway, job=job)
    return True


class BatchHistogram(Collector):
    """A Prometheus histogram observed a batch at a time: one lock and one bisect per value
    (prometheus_client's ``Histogram.observe`` takes two locks per value: ~1.5 us, too much
    for every record of a consumer)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: Mapping[str, str],
        buckets: Iterable[float],
        registry: CollectorRegistry,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labels = dict(labels)
        self._bounds = sorted(buckets)
        self._counts = [0] * (len(self._bounds) + 1)  # the last one: above every bound
        self._sum = 0.0
        self._lock = threading.Lock()  # the metrics endpoint reads from its own thread
        registry.register(self)

    def observe_many(self, values: Iterable[float]) -> None:
        bounds, place = self._bounds, bisect.bisect_left
        counts = [0] * len(self._counts)
        total = 0.0
        for value in values:
            counts[place(bounds, value)] += 1
            total += value
        with self._lock:
            for index, count in enumerate(counts):
                self._counts[index] += count
            self._sum += total

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        family = HistogramMetricFamily(self._name, self._documentation, labels=list(self._labels))
        cumulative, buckets = 0, []
        for bound, count in zip([*map(floatToGoString, self._bounds), "+Inf"], counts, strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        family.add_metric(list(self._labels.values()), buckets, total)
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self._name, self._documentation, labels=list(self._labels))
