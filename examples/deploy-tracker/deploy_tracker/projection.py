"""The ``deploy-tracker`` projection: every deploy, and deploy counts per service and outcome.

A handler is what spectral's engine runs for ``spectral consume deploy-tracker`` (and replays,
dry runs and rebuilds). It gives its consumer ``name``, the ``event_types`` it reads (one topic
each), the ``database_role`` its sessions act as, and ``apply``: set-based SQL inside the
engine's transaction. Dedup, offsets, retries, dead letters and the one-by-one fallback after a
data error are the engine's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import asyncpg
from prometheus_client import CollectorRegistry

from deploy_tracker.events import DEPLOY_FINISHED, DeployFinished
from spectral.extend import (
    Delivery,
    Handler,
    HandlerResult,
    Rebuild,
    Rejection,
    Settings,
    load_queries,
)

CONSUMER: Final = "deploy-tracker"
ROLE: Final = "deploys_projector"
_SQL: Final = load_queries(Path(__file__).with_name("queries.sql"))


class DeploysRebuild(Rebuild):
    """``spectral rebuild deploy-tracker``: empty both tables; the topic fills them again."""

    async def prepare(self, conn: asyncpg.Connection) -> None:
        await conn.execute(_SQL["forget_all"])

    async def finish(self, conn: asyncpg.Connection) -> Mapping[str, int]:
        return {"deploys": int(await conn.fetchval(_SQL["count_rows"]))}


class DeploysHandler(Handler[None]):
    database_role = ROLE

    @property
    def name(self) -> str:
        return CONSUMER

    @property
    def event_types(self) -> Sequence[str]:
        return (DEPLOY_FINISHED.event_type,)

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        result: HandlerResult[None] = HandlerResult()
        deploys: list[DeployFinished] = []
        for delivery in deliveries:
            deploy: DeployFinished = delivery.envelope.payload
            if not deploy.service.strip():
                # A data problem of this record alone: it goes to the dead-letter topic.
                result.rejected.append(Rejection(delivery, "no_service", "service is blank"))
            else:
                deploys.append(deploy)
        inserted = await conn.fetch(
            _SQL["insert_deploys"],
            [d.deploy_id for d in deploys],
            [d.service for d in deploys],
            [d.outcome for d in deploys],
            [d.finished_at for d in deploys],
        )
        await conn.execute(
            _SQL["count_outcomes"],
            [r["service"] for r in inserted],
            [r["outcome"] for r in inserted],
            [r["finished_at"] for r in inserted],
        )
        new = {r["deploy_id"] for r in inserted}
        result.stale.update(d.deploy_id for d in deploys if d.deploy_id not in new)
        result.facts["inserted"] = len(new)
        return result

    def rebuild(self) -> Rebuild:
        return DeploysRebuild()


def build(
    settings: Settings,  # noqa: ARG001 - the factory signature every deployment shares
    database_url: str,  # noqa: ARG001 - the engine owns the connections
    registry: CollectorRegistry,  # noqa: ARG001 - no metrics of its own
) -> DeploysHandler:
    """The ``spectral.deployments`` entry point: builds the handler, with no I/O."""
    return DeploysHandler()
