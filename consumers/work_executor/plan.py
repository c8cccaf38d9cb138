"""What a worker does with an item it holds the lease of, decided from the ledger. Pure.

This is where the unknown-outcome rule lives (see executor.py for the whole rule):

1. a recorded ``response`` that no ``parse_report`` has consumed yet is REUSED — paid work is
   never paid again (a crash after the response, or a late answer of an attempt that had been
   declared unknown, both end here);
2. else, if the item's last attempt recorded a ``prompt`` but neither a ``response`` nor an
   ``error`` that concluded it, its call's outcome is UNKNOWN (the worker died or lost its lease
   mid-call). The executor's unknown-outcome policy (outcomes.py) then re-issues that same call
   under its idempotency key — recorded as an ``error`` entry of disposition ``reissue``, which
   does not conclude the attempt — or, when re-issuing is off or used up, counts the attempt as
   used;
3. else a new attempt STARTs if the attempt limit allows (attempts the gateway refused for
   capacity — an ``error`` of kind ``rate_limited`` — do not count: retry.py);
4. else the item is EXHAUSTED.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from consumers.work_executor.retry import FailureKind, RetryStrategy
from producers.work.domain.model import EntryType, LedgerEntry
from producers.work.domain.payloads import response_content

RATE_LIMITED = FailureKind.RATE_LIMITED.value


@dataclass(frozen=True)
class Reuse:
    attempt: int
    content: str | None
    """The answer as the model gave it; None for a paid answer that was not readable."""


REISSUE = "reissue"
"""The disposition of the ``error`` entry recording that an unknown call was re-issued under
its idempotency key: the attempt goes on (its answer may still come)."""


@dataclass(frozen=True)
class Unknown:
    attempt: int
    reissues: int = 0
    """How often this attempt's call was re-issued already."""
    prompt: Mapping[str, Any] | None = None
    """The attempt's recorded prompt: the exact request to re-issue."""


@dataclass(frozen=True)
class Start:
    attempt: int


@dataclass(frozen=True)
class Exhausted:
    attempts: int


Step = Reuse | Unknown | Start | Exhausted


def next_step(attempts_started: int, entries: Sequence[LedgerEntry], policy: RetryStrategy) -> Step:
    parsed = {e.attempt for e in entries if e.entry_type is EntryType.PARSE_REPORT}
    unconsumed = [
        e for e in entries if e.entry_type is EntryType.RESPONSE and e.attempt not in parsed
    ]
    if unconsumed:
        latest = max(unconsumed, key=lambda e: (e.attempt, e.seq))
        return Reuse(latest.attempt, response_content(latest.payload))
    last = attempts_started
    if last > 0:
        mine = [e for e in entries if e.attempt == last]
        kinds = {e.entry_type for e in mine if not is_reissue(e)}
        if EntryType.PROMPT in kinds and not kinds & {EntryType.RESPONSE, EntryType.ERROR}:
            prompt = next(e.payload for e in mine if e.entry_type is EntryType.PROMPT)
            return Unknown(last, sum(1 for e in mine if is_reissue(e)), prompt)
    refused = {
        e.attempt
        for e in entries
        if e.entry_type is EntryType.ERROR and e.payload.get("kind") == RATE_LIMITED
    }
    counted = policy.counted(attempts_started, len(refused))
    if policy.may_start_attempt(counted):
        return Start(attempts_started + 1)
    return Exhausted(counted)


def is_reissue(entry: LedgerEntry) -> bool:
    """An ``error`` entry recording that the attempt's call was sent again under its key."""
    return entry.entry_type is EntryType.ERROR and entry.payload.get("disposition") == REISSUE
