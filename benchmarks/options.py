"""What one ``make bench`` run does (``python -m benchmarks --help``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

STAGES = ("triage", "executor")


@dataclass(frozen=True)
class Options:
    events: int = 200_000
    clusters: int = 4_000
    partitions: int = 6
    naive_events: int = 10_000
    drain_repeats: int = 3
    scaling: tuple[int, ...] = (1, 2, 3)
    rerun_single: bool = True
    """Run the 1-process scaling point on its own (else the first pass stands for it)."""
    executor_items: int = 1_000
    executor_baseline_items: int = 300
    executor_epics: int = 10
    """Epics per backlog (one generate-all per backlog): items share a document 10 at a time."""
    stages: tuple[str, ...] = STAGES
    stage_timeout: float = 240.0
    keep: bool = False
    log_dir: Path = field(default_factory=lambda: Path(__file__).with_name("results") / "logs")
