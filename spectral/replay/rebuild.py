"""``spectral rebuild NAME``: a projection rebuilt from its topics in one transaction.

Any deployment whose handler gives a :class:`~spectral.engine.handler.Rebuild` can be rebuilt:

1. refused while the live consumer group has active members (stop it first: it would wait on
   the rebuild's row locks for the whole rebuild anyway);
2. one database transaction, acting as the handler's role: the consumer's dedup keys are
   forgotten, then ``Rebuild.prepare`` resets the projection;
3. every partition of the handler's topics is replayed from its first offset to the end offsets
   captured at the start, through the engine and the handler (spectral/replay/replay.py,
   ATOMIC mode: every batch a savepoint; nothing is produced to the dead-letter topics — what
   fails is reported, and was dead-lettered when it was first consumed);
4. ``Rebuild.finish`` (facts for the report);
5. COMMIT — only if every partition was read to its end; otherwise (interrupted, broker gone)
   everything rolls back and the projection is as it was. ``dry_run`` does it all and rolls
   back, reporting the diff.

The dedup record again holds every replayed key, so the live group, restarted, deduplicates
what it re-reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

import asyncpg

from spectral.db.queries import load_queries
from spectral.engine.handler import Rebuild
from spectral.errors import ConfigurationError
from spectral.kafka.topics import group_for
from spectral.replay.offsets import require_idle
from spectral.replay.range import Beginning
from spectral.replay.replay import (
    HandlerFactory,
    Mode,
    Progress,
    ReplayReport,
    ReplayRequest,
    replay,
)
from spectral.settings import Settings

_SQL: Final = load_queries(Path(__file__).with_name("rebuild.sql"))


class NotRebuildableError(ConfigurationError):
    """The deployment's handler gives no Rebuild."""


class _Forgetting:
    """The rebuild's transaction hooks: forget the consumer's keys, then the handler's own."""

    def __init__(self, consumer: str, rebuild: Rebuild) -> None:
        self._consumer = consumer
        self._rebuild = rebuild

    async def prepare(self, conn: asyncpg.Connection) -> None:
        await conn.execute(_SQL["forget_consumer"], self._consumer)
        await self._rebuild.prepare(conn)

    async def finish(self, conn: asyncpg.Connection) -> Mapping[str, int]:
        return await self._rebuild.finish(conn)


async def rebuild(
    make_handler: HandlerFactory,
    settings: Settings,
    *,
    kafka_bootstrap: str,
    database_url: str,
    group: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    max_batch: int = ReplayRequest.max_batch,
) -> ReplayReport:
    """Rebuild the projection of the handler ``make_handler`` builds (see the module docstring);
    ``group``: the live group that must have no members (default: the prefix + its name);
    ``max_batch``: most records a savepoint."""
    probe = make_handler(database_url)  # a handler is built without I/O: ask, then close it
    try:
        consumer, how = probe.name, probe.rebuild()
    finally:
        await probe.close()
    if how is None:
        raise NotRebuildableError(
            f"deployment {consumer!r} cannot be rebuilt: its handler gives no Rebuild "
            "(Handler.rebuild)"
        )
    await require_idle(
        settings,
        kafka_bootstrap,
        group or group_for(consumer, settings.topic_prefix),
        "the live consumer would wait on the rebuild's locks for its whole duration",
    )
    return await replay(
        make_handler,
        settings,
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        request=ReplayRequest(
            Beginning(), mode=Mode.DRY_RUN if dry_run else Mode.ATOMIC, max_batch=max_batch
        ),
        hooks=_Forgetting(consumer, how),
        progress=progress,
    )
