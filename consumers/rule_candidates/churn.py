"""The cluster_id churn reading (ADR-057 open risk), computed from per-window counts (pure).

If FailureClusterService loses its cluster identities, every cluster is minted anew and the
number of distinct cluster_ids signalled per day jumps. The projection records which cluster_ids
were signalled in which hour (platform.cluster_signal_hours); the database counts distinct
cluster_ids per 24-hour window; this module turns those counts into the two gauges the alerting
rule compares (deploy/prometheus/spectral-alerts.yaml).

Windows
    Window 0 is the current hour bucket plus the 23 before it (so it spans 23 to 24 hours of
    real time: the record's resolution is one hour). Window ``d`` is the 24 hour buckets ending
    ``24 * d`` hours before the current one. The baseline is the average over windows 1..7 that
    the record fully covers (a window starting before the earliest recorded hour is left out,
    so a fresh deployment does not compare against days it never saw). With no covered window
    the baseline is 0 and ``baseline_windows`` is 0; the alerting rule requires history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

BASELINE_WINDOWS: Final = 7
"""How many previous 24-hour windows the baseline averages over."""

RETENTION_HOURS: Final = 24 * (BASELINE_WINDOWS + 2)
"""Hour buckets older than this are pruned (the reading needs 8 windows; one spare day)."""


@dataclass(frozen=True, slots=True)
class WindowCount:
    """Distinct cluster_ids signalled in one 24-hour window."""

    index: int
    covered: bool
    clusters: int


@dataclass(frozen=True, slots=True)
class Baseline:
    """The trailing baseline, valid for one hour bucket."""

    hour: datetime
    average: float
    windows: int


@dataclass(frozen=True, slots=True)
class ChurnReading:
    distinct_24h: int
    baseline_24h: float
    baseline_windows: int

    @property
    def ratio(self) -> float | None:
        """distinct_24h / baseline, or None without a baseline."""
        return self.distinct_24h / self.baseline_24h if self.baseline_24h > 0 else None


def baseline(hour: datetime, previous: Sequence[WindowCount]) -> Baseline:
    """The average of the covered windows among ``previous`` (windows 1..7)."""
    counts = [w.clusters for w in previous if w.covered and 1 <= w.index <= BASELINE_WINDOWS]
    average = sum(counts) / len(counts) if counts else 0.0
    return Baseline(hour=hour, average=average, windows=len(counts))


def reading(distinct_24h: int, trailing: Baseline) -> ChurnReading:
    return ChurnReading(
        distinct_24h=distinct_24h,
        baseline_24h=trailing.average,
        baseline_windows=trailing.windows,
    )


def exceeds(
    current: ChurnReading, factor: float = 3.0, minimum: int = 20, windows: int = 3
) -> bool:
    """The alerting rule's condition, for tests and the CLI: ``distinct > factor x baseline``.

    Requires at least ``windows`` covered baseline windows and ``minimum`` distinct clusters,
    so a young deployment or a quiet week does not page on a handful of clusters.
    """
    return (
        current.baseline_windows >= windows
        and current.distinct_24h >= minimum
        and current.distinct_24h > factor * current.baseline_24h
    )
