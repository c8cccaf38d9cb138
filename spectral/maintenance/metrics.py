"""Maintenance's instruments, in one place; every label value comes from a fixed set."""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from spectral.maintenance.policy import Hold
from spectral.maintenance.retention import Pruned
from spectral.observability.metrics import per_member

TABLES = ("core.event_handled", "core.outbox")
LAST_SUCCESS = "spectral_maintenance_last_success_timestamp_seconds"
MAINTENANCE_JOB = "spectral-maintenance"
"""The scrape job (and Pushgateway job) of `spectral maintenance`, as the alert rules name it."""
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class RunOutcome(StrEnum):
    OK = "ok"
    FAILED = "failed"
    BUSY = "busy"
    """Another maintenance run held the lock: this one did nothing."""


class MaintenanceMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        runs = Counter(
            "spectral_maintenance_runs_total",
            "Maintenance passes, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.runs = per_member(runs, RunOutcome)
        self.last_success = Gauge(
            LAST_SUCCESS,
            "When a maintenance pass last completed (Unix time).",
            registry=registry,
        )
        self.duration = Histogram(
            "spectral_maintenance_duration_seconds",
            "Duration of one maintenance pass.",
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.horizon = Gauge(
            "spectral_dedup_horizon_seconds",
            "Dedup keys are kept at least this long after they were handled (0 until known).",
            registry=registry,
        )
        self.remembered_for = Gauge(
            "spectral_dedup_remembered_seconds",
            "Age of the oldest generation of dedup keys still remembered.",
            registry=registry,
        )
        held = Gauge(
            "spectral_dedup_rotation_held",
            "1 for the reason the dedup record was last not rotated ('none' when it was).",
            ["reason"],
            registry=registry,
        )
        self.held = per_member(held, Hold)
        self.forgotten = Counter(
            "spectral_dedup_forgotten_rows_total",
            "Dedup rows forgotten behind the horizon (statistics' estimate per generation).",
            registry=registry,
        )
        self.rotations = Counter(
            "spectral_dedup_rotations_total",
            "Dedup generations started.",
            registry=registry,
        )
        self.pruned = Counter(
            "spectral_outbox_pruned_rows_total",
            "Published outbox rows pruned after the retention (estimate per generation).",
            registry=registry,
        )
        self.evacuated = Counter(
            "spectral_outbox_moved_delayed_rows_total",
            "Delayed outbox rows moved from an ended generation to the current one.",
            registry=registry,
        )
        self.outbox_blocked = Gauge(
            "spectral_outbox_generations_waiting_for_relay",
            "Ended outbox generations that still hold publishable, unpublished rows.",
            registry=registry,
        )
        self.rows = Gauge(
            "spectral_table_rows",
            "Live rows of a table maintenance keeps bounded or measures (statistics' estimate).",
            ["table"],
            registry=registry,
        )
        self.bytes = Gauge(
            "spectral_table_bytes",
            "Bytes of a table maintenance keeps bounded or measures (heap, indexes and TOAST of "
            "every partition).",
            ["table"],
            registry=registry,
        )
        self.pruned_rows = Counter(
            "spectral_retention_pruned_rows_total",
            "Rows pruned behind a table's retention horizon.",
            ["table"],
            registry=registry,
        )
        self.retention_horizon = Gauge(
            "spectral_retention_horizon_seconds",
            "Rows of the table older than this are pruned (absent while none can be: kept for "
            "ever, or the broker could not be asked).",
            ["table"],
            registry=registry,
        )

    def table(self, table: str, rows: int, size: int) -> None:
        """The table's size (``table``: one of the fixed set the pass measures)."""
        self.rows.labels(table).set(rows)
        self.bytes.labels(table).set(size)

    def retention(self, pruned: Pruned, *, dry_run: bool) -> None:
        if not dry_run:
            self.pruned_rows.labels(pruned.table).inc(pruned.rows)
        if pruned.horizon_seconds is not None:
            self.retention_horizon.labels(pruned.table).set(pruned.horizon_seconds)

    def hold(self, reason: Hold) -> None:
        for each, gauge in self.held.items():
            gauge.set(1 if each is reason else 0)
