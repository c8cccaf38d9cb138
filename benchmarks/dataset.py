"""A realistic, deterministic stream of failure-cluster snapshots (pure, no I/O).

What it looks like (defaults of :class:`DatasetSpec`):

* ``clusters`` clusters over a few hundred rules and a few dozen workspaces, severities mostly
  low/medium; how often a cluster is re-snapshotted is skewed (a few hot clusters, a long tail);
* each snapshot grows the cluster: more failures, a later ``last_observed_at``, now and then a
  fresher failure in the evidence bundle;
* about 1 KB per record: the contract allows up to 10 evidence items (~1.8 KB with realistic
  summaries); this stream carries 1 to 3 (2 on average) to land near 1 KB;
* ``duplicate_rate`` of the records re-send an earlier snapshot of the cluster (same
  idempotency key): half as the very same bytes (a producer retry), half with a new event_id
  and occurred_at (a relay that re-published);
* ``stale_rate`` of the records are snapshots older than one already sent for the cluster (a
  lagging producer replica): new content, earlier ``last_observed_at`` -> consumers judge them
  stale.

Records are built as plain dicts and written with orjson (the producer's builder validates
through pydantic and costs ~160 us per record, too slow for 200,000); the snapshot hash and the
idempotency key come from :mod:`contracts`, and :func:`verify_sample` decodes a sample of the
stream with the installed registry's ``decode`` so a drift from the contract fails the run up front.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from types import SimpleNamespace
from typing import Any, Final

import orjson

from contracts import FAILURE_CLUSTER_DETECTED, format_utc, snapshot_hash
from spectral.engine.decode import RecordDecoder
from spectral.plugins import installed_registry

_START: Final = datetime(2025, 11, 20, 8, 0, tzinfo=UTC)
"""Observation times start here and grow by up to 600 s a snapshot: a hot cluster's reach about
two weeks later. They must stay in the past: the projection caps an observation time at its
record's timestamp plus five minutes (a producer clock running ahead), and a stream from the
future would be ordered by record timestamps instead."""
_SEVERITIES: Final = ("low", "medium", "high")
_SEVERITY_WEIGHTS: Final = (55, 35, 10)
_SUMMARIES: Final = (
    "TLS handshake to {host} timed out after {n}s",
    "certificate chain for {host} is missing an intermediate",
    "bucket ACL of logs-{n} could not be read: AccessDenied",
    "rule evaluation exceeded its {n} ms budget on {host}",
    "expected header Strict-Transport-Security on {host}, response had none",
    "policy document {n} grants s3:GetObject to a wildcard principal",
    "DNS lookup of {host} returned SERVFAIL ({n} retries)",
    "open port {n} on {host} is not in the allow-list",
)
_HOSTS: Final = tuple(f"api-{n}.{zone}.example.com" for n in range(40) for zone in ("eu", "us"))


@dataclass(frozen=True)
class DatasetSpec:
    events: int = 200_000
    clusters: int = 4_000
    duplicate_rate: float = 0.05
    stale_rate: float = 0.02
    evidence_items: tuple[int, int] = (1, 3)
    rules: int = 300
    workspaces: int = 40
    seed: int = 8


@dataclass
class _Cluster:
    cluster_id: str
    rule_id: str
    workspace_id: str
    severity: str
    failure_count: int
    first_observed_at: datetime
    last_observed_at: datetime
    evidence: list[dict[str, Any]]
    stub: str | None
    last_payload: dict[str, Any] | None = None
    last_record: bytes | None = None


@dataclass(frozen=True)
class Record:
    key: bytes
    value: bytes
    kind: str
    idempotency_key: str
    """``snapshot`` | ``duplicate`` | ``stale``."""


@dataclass
class DatasetStats:
    records: int = 0
    bytes: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    clusters_touched: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    """Distinct idempotency keys: what a consumer applies or judges stale, once each."""
    newest: dict[str, str] = field(default_factory=dict)
    """cluster_id -> the snapshot_hash of its newest snapshot: what the projection must hold."""

    def add(self, record: Record, cluster_id: str) -> None:
        self.records += 1
        self.bytes += len(record.value)
        self.kinds[record.kind] = self.kinds.get(record.kind, 0) + 1
        self.clusters_touched.add(cluster_id)
        self.keys.add(record.idempotency_key)
        if record.kind == "snapshot":  # each one grows its cluster: newer than any before it
            self.newest[cluster_id] = record.idempotency_key.rpartition(":")[2]

    @property
    def mean_bytes(self) -> float:
        return self.bytes / self.records if self.records else 0.0


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


class _Generator:
    def __init__(self, spec: DatasetSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        rng = self.rng
        rules = [_uuid(rng) for _ in range(spec.rules)]
        workspaces = [_uuid(rng) for _ in range(spec.workspaces)]
        self.clusters: list[_Cluster] = []
        for _ in range(spec.clusters):
            first = _START + timedelta(seconds=rng.randrange(0, 86_400))
            severity = rng.choices(_SEVERITIES, _SEVERITY_WEIGHTS)[0]
            stub = None
            if rng.random() < 0.05:
                stub = f'rule "{rng.choice(_HOSTS)}" {{ when failures > 3 then page }}'
            cluster = _Cluster(
                cluster_id=_uuid(rng),
                rule_id=rng.choice(rules),
                workspace_id=rng.choice(workspaces),
                severity=severity,
                failure_count=0,
                first_observed_at=first,
                last_observed_at=first,
                evidence=[],
                stub=stub,
            )
            self.clusters.append(cluster)
        # Skewed popularity: weight 1/(rank+10) — a few hot clusters, a long tail.
        self.cum_weights = list(accumulate(1.0 / (rank + 10) for rank in range(spec.clusters)))
        self.occurred = _START + timedelta(days=2)

    def _failure(self, cluster: _Cluster) -> dict[str, Any]:
        rng = self.rng
        text = rng.choice(_SUMMARIES).format(host=rng.choice(_HOSTS), n=rng.randrange(2, 900))
        return {
            "failure_id": f"scan-{rng.getrandbits(64):016x}",
            "observed_at": format_utc(cluster.last_observed_at),
            "summary": text,
        }

    def _grow(self, cluster: _Cluster) -> None:
        rng = self.rng
        cluster.failure_count += rng.randrange(1, 5)
        cluster.last_observed_at += timedelta(seconds=rng.randrange(1, 600))
        low, high = self.spec.evidence_items
        size = rng.randrange(low, high + 1)
        if not cluster.evidence or rng.random() < 0.5:
            cluster.evidence.insert(0, self._failure(cluster))
        cluster.evidence = cluster.evidence[:size]

    def _payload(
        self,
        cluster: _Cluster,
        failure_count: int,
        last_observed_at: datetime,
        evidence: list[dict[str, Any]],
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "cluster_id": cluster.cluster_id,
            "snapshot_hash": "",
            "rule_id": cluster.rule_id,
            "workspace_id": cluster.workspace_id,
            "severity": cluster.severity,
            "failure_count": failure_count,
            "first_observed_at": format_utc(cluster.first_observed_at),
            "last_observed_at": format_utc(last_observed_at),
            "evidence_bundle": evidence,
            "suggested_rule_stub": cluster.stub,
        }
        payload["snapshot_hash"] = snapshot_hash(payload)
        return payload

    def _envelope(self, payload: dict[str, Any]) -> bytes:
        self.occurred += timedelta(milliseconds=self.rng.randrange(1, 50))
        return orjson.dumps(
            {
                "event_id": _uuid(self.rng),
                "event_type": FAILURE_CLUSTER_DETECTED,
                "schema_version": 1,
                "source": "platform",
                "target": "platform",
                "occurred_at": format_utc(self.occurred),
                "idempotency_key": _key(payload),
                "correlation_id": None,
                "causation_id": None,
                "payload": payload,
            }
        )

    def next(self) -> tuple[Record, str]:
        rng = self.rng
        cluster = rng.choices(self.clusters, cum_weights=self.cum_weights)[0]
        roll = rng.random()
        if cluster.last_payload is not None and cluster.last_record is not None:
            if roll < self.spec.duplicate_rate:
                if rng.random() < 0.5:
                    value = cluster.last_record
                else:
                    value = self._envelope(cluster.last_payload)
                key = _key(cluster.last_payload)
                return Record(
                    cluster.cluster_id.encode(), value, "duplicate", key
                ), cluster.cluster_id
            if roll < self.spec.duplicate_rate + self.spec.stale_rate and cluster.failure_count > 1:
                # An older view of the cluster than the one already sent: fewer failures and an
                # earlier last_observed_at (never before first_observed_at).
                earlier = max(
                    cluster.first_observed_at,
                    cluster.last_observed_at - timedelta(seconds=rng.randrange(1, 900)),
                )
                payload = self._payload(
                    cluster, cluster.failure_count - 1, earlier, cluster.evidence[-1:]
                )
                value = self._envelope(payload)
                record = Record(cluster.cluster_id.encode(), value, "stale", _key(payload))
                return record, cluster.cluster_id
        self._grow(cluster)
        payload = self._payload(
            cluster, cluster.failure_count, cluster.last_observed_at, list(cluster.evidence)
        )
        value = self._envelope(payload)
        cluster.last_payload = payload
        cluster.last_record = value
        record = Record(cluster.cluster_id.encode(), value, "snapshot", _key(payload))
        return record, cluster.cluster_id


def _key(payload: dict[str, Any]) -> str:
    return f"{payload['cluster_id']}:{payload['snapshot_hash']}"


def generate(spec: DatasetSpec, stats: DatasetStats | None = None) -> Iterator[Record]:
    """The records of the stream, in publication order (deterministic for a given spec)."""
    generator = _Generator(spec)
    for _ in range(spec.events):
        record, cluster_id = generator.next()
        if stats is not None:
            stats.add(record, cluster_id)
        yield record


def verify_sample(records: list[Record], every: int = 997) -> int:
    """Decode every ``every``-th record (and the first 50) with the contract's decoder;
    raises :class:`contracts.DecodeError` if any is refused. Returns how many were checked."""
    checked = 0
    for index, record in enumerate(records):
        if index < 50 or index % every == 0:
            installed_registry().decode(record.value)
            checked += 1
    return checked


@dataclass(frozen=True)
class DecodeCost:
    """CPU per record, in microseconds, of the consumer's decode step on this data, measured in
    this process (one core, no I/O): ``json.loads`` alone (the raw drains parse with it too),
    and the whole step the engine runs per record as the rule-candidates consumer runs it
    (``RecordDecoder`` with views: the contract check of the record and its key, the view, the
    ``Delivery``)."""

    loads_us: float
    decode_us: float


def decode_cost(records: list[Record], sample: int = 20_000) -> DecodeCost:
    """:class:`DecodeCost` over the first ``sample`` records (best of three, to shed the other
    processes' interruptions on a shared machine)."""
    chosen = records[:sample]

    def loads() -> None:
        for record in chosen:
            json.loads(record.value)

    decoder = RecordDecoder(
        "rule-candidates",
        {FAILURE_CLUSTER_DETECTED: FAILURE_CLUSTER_DETECTED},
        installed_registry(),
        views=True,  # as the rule-candidates handler reads (reads_views)
    )
    fetched = [
        SimpleNamespace(
            topic=FAILURE_CLUSTER_DETECTED,
            partition=0,
            offset=offset,
            key=record.key,
            value=record.value,
            timestamp=0,
            headers=(),
        )
        for offset, record in enumerate(chosen)
    ]

    def full() -> None:
        decoder.decode_all(fetched)

    def best(step: Callable[[], None]) -> float:
        times = []
        for _ in range(3):
            started = time.process_time()
            step()
            times.append(time.process_time() - started)
        return min(times) / max(1, len(chosen)) * 1e6

    return DecodeCost(loads_us=best(loads), decode_us=best(full))
