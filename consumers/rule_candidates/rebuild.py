"""``spectral rebuild rule-candidates``: the triage inbox rebuilt from the topic, operator
columns kept.

Procedure (one database transaction, as ``spectral_projector``; see rebuild.sql):

1. refuse while the live consumer group has active members (stop it first: it would wait on
   the rebuild's row locks anyway);
2. save the current rows' snapshot and lifecycle columns and this hour's churn record;
3. delete the consumer's ``core.event_handled`` rows and set every row's ``ordered_at`` and
   ``last_observed_at`` to ``-infinity``, so any snapshot of the topic is newer than the stored
   one;
4. replay the topic from its first offset to the end offsets captured at the start, through the
   engine and the deployment's own handler (spectral/consumer/replay.py, ATOMIC mode: every
   batch a savepoint of the one transaction; nothing is produced to the dead-letter topic —
   what fails is reported, and was dead-lettered when it was first consumed);
5. rows no record reached (snapshots past the topic's retention) get their saved snapshot back;
   ``last_signaled_at`` and ``resurfaced_at`` get their saved values back (a rebuild is not a
   signal); the churn record loses what the replay added to it;
6. COMMIT — only if every partition was read to its end; otherwise (interrupted, broker gone)
   everything rolls back and the projection is as it was.

Guarantees: operator columns (status, assigned_to, notes, deleted_at) are never written — the
projector role has no privilege on them and none to delete rows, so the database refuses
anything else; readers see the old projection until the one commit and the rebuilt one after
it; each row ends with the newest snapshot of its cluster in the topic (the upsert's order),
exactly what consuming the topic from scratch would give; ``core.event_handled`` again records
every replayed key, so the live group, restarted, deduplicates what it re-reads. ``--dry-run``
does all of it and rolls back, reporting the diff.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

import asyncpg
from prometheus_client import CollectorRegistry

from consumers.rule_candidates.handler import CONSUMER_NAME, RuleCandidatesHandler
from consumers.rule_candidates.metrics import RuleCandidateMetrics
from spectral.consumer.offsets import require_idle
from spectral.consumer.replay import Mode, Progress, ReplayReport, ReplayRequest, replay
from spectral.consumer.replay_range import Beginning
from spectral.db.queries import load_queries
from spectral.kafka.topics import group_for
from spectral.settings import Settings

_SQL: Final = load_queries(Path(__file__).with_name("rebuild.sql"))


class RebuildHooks:
    """Steps 2-3 (``prepare``) and 5 (``finish``) of the procedure, in the rebuild's transaction."""

    async def prepare(self, conn: asyncpg.Connection) -> None:
        await conn.execute(_SQL["save_before"])
        await conn.execute(_SQL["save_signal_hour"])
        await conn.execute(_SQL["forget_handled"], CONSUMER_NAME)
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


async def rebuild(
    settings: Settings,
    *,
    kafka_bootstrap: str,
    database_url: str,
    group: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> ReplayReport:
    """Rebuild the projection from the topic (see the module docstring)."""
    await require_idle(
        settings,
        kafka_bootstrap,
        group or group_for(CONSUMER_NAME, settings.topic_prefix),
        "the live consumer would wait on the rebuild's locks for its whole duration",
    )

    def make_handler(_url: str) -> RuleCandidatesHandler:
        return RuleCandidatesHandler(RuleCandidateMetrics(CollectorRegistry()))

    return await replay(
        make_handler,
        settings,
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        request=ReplayRequest(Beginning(), mode=Mode.DRY_RUN if dry_run else Mode.ATOMIC),
        hooks=RebuildHooks(),
        progress=progress,
    )
