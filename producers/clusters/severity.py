"""Severity policy (ADR-057 D4): low | medium | high from size, rate and rule criticality.

Pure: no I/O, no clock. Every input is a fact of the cluster itself, so the same failures always
give the same severity — a snapshot never changes just because time passed.

The rule, in two steps:

1. Base tier = the higher of the size tier and the rate tier.

   ============  ==========================  ===========================================
   tier          size: failure_count         rate: failures within ``rate_window`` (24 h)
                                             before the cluster's last_observed_at
   ============  ==========================  ===========================================
   high          >= ``high_size`` (50)       >= ``high_rate`` (25)
   medium        >= ``medium_size`` (10)     >= ``medium_rate`` (5)
   low           otherwise                   otherwise
   ============  ==========================  ===========================================

2. Rule criticality shifts the base tier, clamped to low..high:

   ===========  =====  ==========================================================
   criticality  shift  meaning
   ===========  =====  ==========================================================
   low          -1     a rule known to be noisy: one tier down
   normal        0     the default (``ClusterPolicy.default_criticality``)
   high         +1     one tier up
   critical     +2     always high: any failing critical rule needs an operator
   ===========  =====  ==========================================================

Criticality comes from ``clusters.rule_criticality`` (``spectral clusters criticality``), else
the service's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Final

from contracts.failure_cluster import Severity

TIERS: Final[tuple[Severity, ...]] = ("low", "medium", "high")


class Criticality(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    CRITICAL = "critical"


SHIFT: Final[dict[Criticality, int]] = {
    Criticality.LOW: -1,
    Criticality.NORMAL: 0,
    Criticality.HIGH: 1,
    Criticality.CRITICAL: 2,
}


@dataclass(frozen=True)
class SeverityPolicy:
    medium_size: int = 10
    high_size: int = 50
    medium_rate: int = 5
    high_rate: int = 25
    rate_window: timedelta = timedelta(hours=24)

    def __post_init__(self) -> None:
        if not 0 < self.medium_size <= self.high_size:
            raise ValueError("need 0 < medium_size <= high_size")
        if not 0 < self.medium_rate <= self.high_rate:
            raise ValueError("need 0 < medium_rate <= high_rate")
        if self.rate_window <= timedelta(0):
            raise ValueError("rate_window must be positive")


def _tier(value: int, medium: int, high: int) -> int:
    if value >= high:
        return 2
    if value >= medium:
        return 1
    return 0


def derive_severity(
    failure_count: int,
    recent_count: int,
    criticality: Criticality,
    policy: SeverityPolicy | None = None,
) -> Severity:
    """The severity of a cluster of ``failure_count`` failures, ``recent_count`` of them within
    the rate window before its latest failure, for a rule of ``criticality``."""
    p = policy or SeverityPolicy()
    base = max(
        _tier(failure_count, p.medium_size, p.high_size),
        _tier(recent_count, p.medium_rate, p.high_rate),
    )
    shifted = min(max(base + SHIFT[criticality], 0), len(TIERS) - 1)
    return TIERS[shifted]
