"""What one ``make bench`` run does (``python -m benchmarks --help``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

STAGES = (
    "triage",
    "contention",
    "freshness",
    "executor",
    "governance",
    "budgets",
    "dedup",
    "transports",
    "soak",
)
DEFAULT_STAGES = (
    "triage",
    "contention",
    "freshness",
    "executor",
    "governance",
    "budgets",
    "dedup",
    "transports",
)
"""`make bench`; the soak runs for minutes on its own (`make soak`)."""


@dataclass(frozen=True)
class Options:
    events: int = 200_000
    clusters: int = 4_000
    partitions: int = 6
    naive_events: int = 10_000
    naive_seconds: float = 30.0
    """The naive baseline stops after this many seconds if it has not reached ``naive_events``
    (its rate is the figure; on a loaded machine 10,000 one-at-a-time transactions take
    minutes)."""
    peers: tuple[str, ...] = ("faststream", "quix", "quix_guaranteed")
    """The peers the triage stage runs (benchmarks/peers/)."""
    neighbour_processes: int = 2
    neighbour_duty: float = 0.5
    """The contention stage's neighbour: this many processes spinning this fraction of every
    10 ms (benchmarks/neighbour.py), one core's worth by default."""
    contention_rounds: int = 1
    """Rounds of the contention stage, each spectral then quix-streams then quix-streams then
    spectral (ABBA) under the same neighbour."""
    drain_repeats: int = 3
    scaling: tuple[int, ...] = (1, 2, 3)
    rerun_single: bool = True
    """Run the 1-process scaling point on its own (else the first pass stands for it)."""
    executor_items: int = 2_000
    executor_baseline_items: int = 500
    executor_epics: int = 10
    """Epics per backlog (one generate-all per backlog): items share a document 10 at a time."""
    dedup_prefill: int = 1_000_000
    """Rows of the previous dedup generation the ``dedup`` stage claims against and forgets."""
    governance_concurrency: int = 32
    """The gateway's concurrency cap (and the executor's limit for its model route)."""
    governance_rate: float = 40.0
    """Calls the gateway starts per second, at most (429 beyond)."""
    governance_latency: float = 1.0
    """Median call latency in seconds (the p99 is 6 x this)."""
    governance_big_items: int = 10_000
    governance_small_items: int = 10
    governance_capped_items: int = 300
    governance_window: float = 120.0
    """Seconds of the big tenant's steady state measured for throughput (and the executor's RSS,
    whose first half is its warm-up)."""
    budget_items: int = 1_500
    """Items of the budget stage (benchmarks/budgets.py), over 5 nested budget scopes whose
    limits admit about 1,000 of them."""
    budget_executors: int = 3
    budget_latency: float = 0.1
    """The budget stage's median call latency in seconds (the p99 is 6 x this)."""
    compare: Path | None = None
    """Another checkout: its consumer is run against this one's, alternating (A/B)."""
    compare_rounds: int = 2
    transports_events: int = 60_000
    """Records the ``transports`` stage's topic holds (read once per transport)."""
    soak_seconds: float = 300.0
    soak_rate: int = 1000
    """Events per second the soak's producer writes (plus 5 % re-sent)."""
    soak_clusters: int = 500
    freshness_rate: int = 2000
    """Events per second the freshness stage's producer writes into the outbox."""
    freshness_high_rate: int = 10_000
    """A second offered load for the freshness stage (relay on LISTEN/NOTIFY, a window half as
    long); 0 leaves it out."""
    freshness_seconds: float = 40.0
    """The freshness stage's measured window with the relay on LISTEN/NOTIFY (half as long
    polling), after a 5 s warm-up each."""
    stages: tuple[str, ...] = DEFAULT_STAGES
    stage_timeout: float = 420.0
    """Seconds one measured process (a consumer run, a peer) may take: at load 40 beside the
    contention stage's neighbour a first pass of 200,000 events took ~3 minutes."""
    budget: float = 2100.0
    """The whole run, in seconds: stages started late get what is left (at least 10 s) and
    fail their checks rather than overrun."""
    keep: bool = False
    log_dir: Path = field(default_factory=lambda: Path(__file__).with_name("results") / "logs")
    started: float = field(default_factory=time.monotonic)

    def limit(self) -> float:
        """Seconds the next stage may take."""
        left = self.budget - (time.monotonic() - self.started)
        return max(10.0, min(self.stage_timeout, left))
