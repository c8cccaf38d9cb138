"""Unknown outcomes: what resolves the reservation of a paid call whose outcome is unknown (its
request left, then its worker died or lost its lease, or the call timed out, before an answer or
an error came back — the provider may have done and billed it). Pure.

The reservation stays counted in full until one of these resolves it, exactly once:

* **re-issue** (``SPECTRAL_WORK_UNKNOWN_OUTCOME_POLICY=reissue``, the default): the item's next
  holder sends *the same call again under the same idempotency key* — the recorded prompt, the
  same attempt — and records that it did (an ``error`` entry of disposition ``reissue``, which
  does not end the attempt). A gateway that honours idempotency keys answers with the first
  call's answer and bills once; that answer settles the attempt's reservation from its usage,
  once. A gateway that ignores the key does the call again: it bills twice, and the ledger
  records one answer — use ``release`` for such a gateway. At most ``max_reissues`` times per
  attempt (a call whose re-issues keep dying is then counted as used, as under ``release``); a
  re-issued call that fails keeps its reservation ``unknown`` (the first call may have been
  billed), and the item's next attempt is a new call.
* **re-issue within the lease after a timeout**: a call that timed out while its worker is
  alive has an unknown outcome too (the request left; the provider may still do it). Under
  ``reissue`` the worker sends it again at once under the same idempotency key, recorded the
  same way (and counted against the same ``max_reissues``), when the re-issue fits the lease:
  recording it renews the lease, and the re-issue is bounded by the same timeout the call ran
  into, so that time plus ``REISSUE_LEASE_MARGIN_SECONDS`` must be within the lease timeout.
  Otherwise (or once re-issues are used up) the attempt ends as before: its reservation stays
  ``unknown`` and the item's next attempt is a new call with a new key.
* **release after a horizon**: a reservation left ``unknown`` (the policy is ``release``, the
  call timed out, re-issues were used up, or the item was canceled) is released by the
  executor's sweep once it is older than ``SPECTRAL_WORK_UNKNOWN_OUTCOME_HORIZON_SECONDS``
  (recorded on the spend row, counted, logged). Until then it counts in full against its budget
  — the time a provider's usage export or ``spectral work reconcile`` has to tell what it billed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from consumers.work_executor.plan import Unknown
from producers.work.domain.settings import WorkSettings
from spectral.settings import Settings

MAX_REISSUES: Final = 3

REISSUE_LEASE_MARGIN_SECONDS: Final = 5.0
"""A call that timed out is re-issued within the lease only if its timeout plus this is within
the lease timeout (time to record the answer before the lease could be taken)."""


@dataclass(frozen=True)
class UnknownOutcomePolicy:
    reissue: bool = True
    """Re-issue a call whose worker died mid-call under the same idempotency key."""
    horizon_seconds: float = 86_400.0
    """Release a reservation left ``unknown`` once it is this old."""
    max_reissues: int = MAX_REISSUES

    def __post_init__(self) -> None:
        if self.horizon_seconds <= 0:
            raise ValueError("horizon_seconds > 0")
        if self.max_reissues < 0:
            raise ValueError("max_reissues >= 0")

    @classmethod
    def from_settings(cls, settings: Settings) -> UnknownOutcomePolicy:
        work = WorkSettings.of(settings)
        return cls(
            reissue=work.work_unknown_outcome_policy == "reissue",
            horizon_seconds=work.work_unknown_outcome_horizon_seconds,
        )

    def reissues(self, step: Unknown) -> bool:
        """Whether the unknown call of ``step`` is sent again under its idempotency key."""
        return self.reissue and step.prompt is not None and step.reissues < self.max_reissues

    def reissues_timed_out(self, reissues: int, call_seconds: float, lease_seconds: float) -> bool:
        """Whether a call that timed out after ``call_seconds`` (re-issued ``reissues`` times
        already) is sent again now under its idempotency key by its live worker: the re-issue
        renews the lease and may take as long, so it must fit within ``lease_seconds``."""
        return (
            self.reissue
            and reissues < self.max_reissues
            and call_seconds + REISSUE_LEASE_MARGIN_SECONDS <= lease_seconds
        )
