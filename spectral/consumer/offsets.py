"""Resetting a live consumer group's committed offsets (``spectral offsets reset``).

Refused while the group has active members: a running member would overwrite the reset with its
next commit (it keeps its in-memory positions), and Kafka refuses commits from outside a group
that has members anyway. The reset itself commits, for each covered partition, the offset the
target names (see replay_range.py): the first offset (``earliest``), the end offset
(``latest``), the first record at or after a timestamp, or explicit offsets (only the partitions
named are reset). When the group starts again, it resumes from there; what it re-reads is
deduplicated by ``core.event_handled`` and what it skips is not applied — so moving forward
skips events for good: prefer a replay to a reset when in doubt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spectral.consumer.ranges import plan_ranges
from spectral.consumer.replay_range import Start
from spectral.errors import PermanentError
from spectral.kafka.groups import GroupState, commit_for_group, committed_offsets, describe_group
from spectral.settings import Settings


class GroupBusyError(PermanentError):
    """The group has active members: its offsets are not reset."""

    def __init__(self, state: GroupState, why: str = "") -> None:
        super().__init__(
            f"refusing: {state.why_busy()}. Stop its consumers first"
            + (f" ({why})." if why else ".")
        )
        self.state = state


async def require_idle(settings: Settings, bootstrap: str, group: str, why: str) -> GroupState:
    """The group's state; GroupBusyError (saying ``why``) while it has active members."""
    state = await describe_group(settings, bootstrap, group)
    if state.active:
        raise GroupBusyError(state, why)
    return state


@dataclass(frozen=True, slots=True)
class OffsetChange:
    topic: str
    partition: int
    before: int | None
    after: int

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "before": self.before,
            "after": self.after,
        }


@dataclass(frozen=True)
class ResetReport:
    group: str
    state: str
    changes: tuple[OffsetChange, ...]
    committed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "state": self.state,
            "committed": self.committed,
            "changes": [c.to_json() for c in self.changes],
        }


async def reset_offsets(
    settings: Settings,
    bootstrap: str,
    *,
    event_types: Sequence[str],
    group: str,
    target: Start,
    dry_run: bool = False,
) -> ResetReport:
    """Commit ``target`` for ``group`` on the topics of ``event_types``; raises GroupBusyError
    while the group has members."""
    ranges = await plan_ranges(settings, bootstrap, event_types, target, None)
    state = await require_idle(
        settings,
        bootstrap,
        group,
        "their next commit would overwrite the reset, and Kafka refuses commits from "
        "outside a group with members",
    )
    before = await committed_offsets(settings, bootstrap, group, [r.key for r in ranges])
    changes = tuple(OffsetChange(r.topic, r.partition, before[r.key], r.start) for r in ranges)
    if not dry_run:
        # Checked again by Kafka: a member that joined since the check makes this commit fail.
        await commit_for_group(settings, bootstrap, group, {r.key: r.start for r in ranges})
    return ResetReport(group, state.state, changes, committed=not dry_run)
