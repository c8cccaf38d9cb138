"""Which dead letters a redrive sends back (pure: no I/O)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, Protocol, TypeVar


class DeadLetterFacts(Protocol):
    """What the choice looks at: a whole record or its summary."""

    @property
    def reason(self) -> str: ...
    @property
    def position(self) -> tuple[int, int]: ...
    @property
    def source_topic(self) -> str: ...
    @property
    def is_reference(self) -> bool: ...


L = TypeVar("L", bound=DeadLetterFacts)


class Skipped(StrEnum):
    OTHER_REASON = "other_reason"  # --reason asked for another one
    ALREADY_REDRIVEN = "already_redriven"  # core.dlq_redrives has it: never twice
    VALUE_NOT_CARRIED = "value_not_carried"  # a reference: the original was too large to carry
    OTHER_SOURCE = "other_source"  # its headers name another source topic than T
    REFUSED = "refused"  # the broker refused the redriven record (left for a later run)


@dataclass
class Selection(Generic[L]):
    chosen: list[L] = field(default_factory=list)
    skipped: Counter[Skipped] = field(default_factory=Counter)


def select(
    records: Iterable[L],
    *,
    source_topic: str,
    reason: str | None,
    redriven: AbstractSet[tuple[int, int]],
) -> Selection[L]:
    """The dead letters to redrive, in DLQ order, and why the others are left."""
    selection: Selection[L] = Selection()
    for record in records:
        if reason is not None and record.reason != reason:
            selection.skipped[Skipped.OTHER_REASON] += 1
        elif record.position in redriven:
            selection.skipped[Skipped.ALREADY_REDRIVEN] += 1
        elif record.source_topic != source_topic:
            selection.skipped[Skipped.OTHER_SOURCE] += 1
        elif record.is_reference:
            selection.skipped[Skipped.VALUE_NOT_CARRIED] += 1
        else:
            selection.chosen.append(record)
    return selection
