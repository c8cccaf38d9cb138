"""Resetting a live consumer group's committed offsets (``spectral offsets reset``).

Refused while the group has active members: a running member would overwrite the reset with its
next commit (it keeps its in-memory positions), and Kafka refuses commits from outside a group
that has members anyway. The reset itself commits, for each covered partition, the offset the
target names (see range.py): the first offset (``earliest``), the end offset
(``latest``), the first record at or after a timestamp, or explicit offsets (only the partitions
named are reset). When the group starts again, it resumes from there; what it re-reads is
deduplicated by ``core.event_handled`` and what it skips is not applied — so moving forward
skips events for good: prefer a replay to a reset when in doubt.

Moving offsets back is a replay by other means, so it gets the replay's guard (guard.py): when
the records the group would read again reach behind the dedup horizon (their keys may have been
forgotten, so they could apply twice), the reset is refused unless told ``beyond_horizon``; a
dry run reports them (``ResetReport.beyond_horizon``) and commits nothing anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spectral.errors import PermanentError
from spectral.kafka.groups import GroupState, commit_for_group, committed_offsets, describe_group
from spectral.replay.guard import BeyondHorizonError, check_replay_horizon
from spectral.replay.range import PartitionRange, Start
from spectral.replay.ranges import plan_ranges
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
    beyond_horizon: str | None = None
    """Why re-reading reaches behind the dedup horizon (None: it does not)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "state": self.state,
            "committed": self.committed,
            "changes": [c.to_json() for c in self.changes],
            "beyond_horizon": self.beyond_horizon,
        }


def reread(change: OffsetChange, end: int) -> PartitionRange:
    """The records the group reads again after ``change``: from the new offset to the one it
    had committed (to the end when it had none: it may have applied them under another name)."""
    upto = end if change.before is None else min(change.before, end)
    return PartitionRange(change.topic, change.partition, change.after, max(upto, change.after))


async def reset_offsets(
    settings: Settings,
    bootstrap: str,
    *,
    event_types: Sequence[str],
    group: str,
    target: Start,
    database_url: str,
    role: str | None = None,
    beyond_horizon: bool = False,
    dry_run: bool = False,
) -> ResetReport:
    """Commit ``target`` for ``group`` on the topics of ``event_types``; raises GroupBusyError
    while the group has members, BeyondHorizonError when what it would read again reaches
    behind the dedup horizon (unless ``beyond_horizon``; checked as ``role``)."""
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
    horizon = await check_replay_horizon(
        settings,
        bootstrap,
        database_url,
        [reread(c, r.end) for c, r in zip(changes, ranges, strict=True)],
        role=role,
    )
    why = horizon.message() if horizon.reaches else None
    if why is not None and not dry_run and not beyond_horizon:
        raise BeyondHorizonError(f"refusing the reset: {why}")
    if not dry_run:
        # Checked again by Kafka: a member that joined since the check makes this commit fail.
        await commit_for_group(settings, bootstrap, group, {r.key: r.start for r in ranges})
    return ResetReport(group, state.state, changes, committed=not dry_run, beyond_horizon=why)
