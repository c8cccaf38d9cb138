"""The replay guard: a replay must not read records whose dedup keys may have been forgotten.

When maintenance forgets a dedup generation it records ``copies_before``: every record that carried
one of its keys had been appended before that time (policy.py, docs/explanation/bounded-state.md).
So a record appended at or after the latest ``copies_before`` carries no forgotten key, and a
replay that starts there applies nothing twice. A range that reaches further back can only
contain such records if a topic now keeps records longer than it did when the keys were
forgotten (its retention was raised): ``spectral replay`` refuses it unless told
``--beyond-horizon`` (a dry run only warns; a rebuild forgets the consumer's keys itself and
needs no guard).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from spectral.db.connect import connect, guarded
from spectral.db.queries import load_queries
from spectral.errors import PermanentError
from spectral.kafka.partitions import fetch_watermarks
from spectral.replay.range import PartitionRange, TopicPartitionKey
from spectral.settings import Settings

_SQL: Final = load_queries(Path(__file__).with_name("guard.sql"))


class BeyondHorizonError(PermanentError):
    """A replay reaches records whose dedup keys may have been forgotten."""


@dataclass(frozen=True)
class HorizonCheck:
    copies_before: datetime | None
    """Records appended before this may carry forgotten keys (None: nothing was forgotten)."""
    reaching: tuple[PartitionRange, ...] = ()
    """The ranges that start before the first record appended at or after it."""

    @property
    def reaches(self) -> bool:
        return bool(self.reaching)

    def message(self) -> str:
        where = ", ".join(f"{r.topic}:{r.partition} from offset {r.start}" for r in self.reaching)
        return (
            f"the range reaches records appended before {self.copies_before:%Y-%m-%dT%H:%M:%SZ}, "
            f"behind the dedup horizon ({where}): keys of records that old may have been "
            "forgotten, so an event among them could be applied a second time. Start later "
            "(--from-timestamp), or pass --beyond-horizon if the consumer's own stale guard "
            "makes a second application harmless"
        )


def beyond(
    ranges: Sequence[PartitionRange], first_at_or_after: Mapping[TopicPartitionKey, int | None]
) -> tuple[PartitionRange, ...]:
    """The non-empty ranges that start before the first record at or after the horizon (None:
    the partition holds no such record, so every record of the range is older)."""
    out = []
    for r in ranges:
        if r.size == 0:
            continue
        first = first_at_or_after.get(r.key)
        if first is None or r.start < first:
            out.append(r)
    return tuple(out)


async def check_replay_horizon(
    settings: Settings,
    bootstrap: str,
    database_url: str,
    ranges: Sequence[PartitionRange],
    *,
    role: str | None = None,
) -> HorizonCheck:
    """Which of ``ranges`` reach behind the dedup horizon."""
    conn = await connect(database_url, role=role)
    try:
        horizon: datetime | None = await guarded(
            "read the dedup horizon", lambda: conn.fetchval(_SQL["copies_before"])
        )
    finally:
        await conn.close()
    if horizon is None:
        return HorizonCheck(None)
    keys = [r.key for r in ranges if r.size]
    marks = await fetch_watermarks(settings, bootstrap, keys, start_time=horizon)
    return HorizonCheck(horizon, beyond(ranges, marks.at_start_time))
