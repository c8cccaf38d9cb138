"""Provider overruns: usage a provider billed above what its call was allowed — the call's
reservation (ADR-035 spend, issue 23's hard cap). Pure.

A reservation is the call's worst case (the prompt's tokens as counted plus the completion
bound, priced) times its route's reserve ratio, and admission never lets settled spend plus
outstanding reservations pass a budget. A provider can still bill more than that — it ignored
``max_tokens``, or counted reasoning, cached or tool tokens. Such usage is recorded as billed
(never clamped), counted (``work_usage_overrun_*``), logged with its size, and fed back to its
route in the transaction that settles it, by ``OverrunPolicy``:

* ``raise`` (default): the route's reserve ratio rises to the largest billed/worst-case ratio it
  has shown, so its next reservations cover what it really bills;
* ``suspend``: the route takes no new call until an operator resumes it
  (``spectral work routes resume MODEL``);

and a route that bills more than ``max_ratio`` times its worst case is suspended whatever the
policy. An overrun also puts its route back on probation (schedule.py: one call at a time
until a bill settles within its reservation), so what a budget can be overshot by is the overrun
of one call in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Final

from producers.work.domain.settings import WorkSettings
from spectral.settings import Settings

RATIO_STEP: Final = Decimal("0.000001")
UNBOUNDED_RATIO: Final = Decimal(1_000_000)
"""The ratio of an overrun whose reservation was 0 (no price configured, yet a cost billed)."""


@dataclass(frozen=True)
class OverrunPolicy:
    suspend: bool = False
    """Suspend a route at its first overrun instead of raising its reservations."""
    max_ratio: Decimal = Decimal(10)
    """The largest reserve ratio raising goes to; a route billing more is suspended."""

    def __post_init__(self) -> None:
        if self.max_ratio < 1:
            raise ValueError("max_ratio >= 1")

    @classmethod
    def from_settings(cls, settings: Settings) -> OverrunPolicy:
        work = WorkSettings.of(settings)
        return cls(
            suspend=work.work_overrun_policy == "suspend",
            max_ratio=Decimal(str(work.work_overrun_max_ratio)),
        )


@dataclass(frozen=True)
class Overrun:
    """What one settled call was billed beyond its reservation."""

    tokens: int
    cost: Decimal
    ratio: Decimal
    """Billed / the call's worst case (its reservation without the route's reserve ratio): what
    the route's reservations must be multiplied by to cover it."""


def overrun_of(
    *,
    tokens: int,
    cost: Decimal,
    reserved_tokens: int,
    reserved_cost: Decimal,
    reserve_ratio: Decimal,
) -> Overrun | None:
    """The overrun of a call billed ``tokens``/``cost`` against its reservation, if any."""
    excess_tokens = max(tokens - reserved_tokens, 0)
    excess_cost = max(cost - reserved_cost, Decimal(0))
    if excess_tokens == 0 and excess_cost == 0:
        return None
    # The reservation was ceil(worst case x reserve_ratio): above 1, the worst case is more than
    # (reserved - 1) / reserve_ratio, so dividing by reserved - 1 never underestimates.
    base = reserved_tokens if reserve_ratio == 1 else max(reserved_tokens - 1, 1)
    ratios = [Decimal(tokens) / Decimal(base)] if reserved_tokens > 0 else []
    if excess_cost > 0:
        ratios.append(cost / reserved_cost if reserved_cost > 0 else UNBOUNDED_RATIO)
    billed = max(ratios, default=UNBOUNDED_RATIO) * reserve_ratio
    # Rounded up: the route's worst case times this ratio is never below what it billed.
    ratio = min(billed, UNBOUNDED_RATIO).quantize(RATIO_STEP, rounding=ROUND_CEILING)
    return Overrun(excess_tokens, excess_cost, ratio)
