"""``spectral rebuild rule-candidates``: the triage inbox rebuilt from the topic, operator
columns kept — the projection's :class:`~spectral.engine.handler.Rebuild`
(``RuleCandidatesHandler.rebuild``; the procedure is spectral/replay/rebuild.py).

In the rebuild's one transaction, as ``spectral_projector`` (see rebuild.sql):

1. ``prepare`` saves the current rows' snapshot and lifecycle columns and this hour's churn
   record, and sets every row's ``ordered_at`` and ``last_observed_at`` to ``-infinity``, so any
   snapshot of the topic is newer than the stored one (spectral has forgotten the consumer's
   dedup keys just before);
2. the topic is replayed from its first offset through the handler;
3. ``finish``: rows no record reached (snapshots past the topic's retention) get their saved
   snapshot back; ``last_signaled_at`` and ``resurfaced_at`` get their saved values back (a
   rebuild is not a signal); the churn record loses what the replay added to it; the diff is
   reported.

Guarantees: operator columns (status, assigned_to, notes, deleted_at) are never written — the
projector role has no privilege on them and none to delete rows, so the database refuses
anything else; readers see the old projection until the one commit and the rebuilt one after
it; each row ends with the newest snapshot of its cluster in the topic (the upsert's order),
exactly what consuming the topic from scratch would give. ``--dry-run`` does all of it and rolls
back, reporting the diff.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

import asyncpg

from spectral.db.queries import load_queries
from spectral.engine.handler import Rebuild

_SQL: Final = load_queries(Path(__file__).with_name("rebuild.sql"))


class RebuildHooks(Rebuild):
    """Steps 1 (``prepare``) and 3 (``finish``), in the rebuild's transaction."""

    async def prepare(self, conn: asyncpg.Connection) -> None:
        await conn.execute(_SQL["save_before"])
        await conn.execute(_SQL["save_signal_hour"])
        await conn.execute(_SQL["reset_order"])

    async def finish(self, conn: asyncpg.Connection) -> Mapping[str, int]:
        kept = len(await conn.fetch(_SQL["restore_unreached"]))
        await conn.execute(_SQL["restore_lifecycle"])
        await conn.execute(_SQL["forget_signal_burst"])
        diff = await conn.fetchrow(_SQL["diff"])
        assert diff is not None  # noqa: S101 - an aggregate always returns one row
        return {
            "rows": diff["total"],
            "inserted": diff["inserted"],
            "changed": diff["changed"],
            "unchanged": diff["total"] - diff["inserted"] - diff["changed"],
            "kept_not_in_topic": kept,
        }
