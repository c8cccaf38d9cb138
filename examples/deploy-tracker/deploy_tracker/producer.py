"""The producer side: a deploy pipeline records a finished deploy and its event in one
transaction (the transactional outbox); ``spectral outbox relay`` publishes it."""

from __future__ import annotations

import asyncpg

from deploy_tracker.events import DEPLOY_FINISHED, DeployFinished
from spectral.extend import OutboxItem, enqueue


async def announce(conn: asyncpg.Connection, deploys: list[DeployFinished]) -> list[int]:
    """Enqueue one ``deploys.deploy.finished`` event per deploy in the caller's transaction
    (keyed by service: one service's deploys keep their order); return the outbox ids."""
    items = [OutboxItem(DEPLOY_FINISHED.envelope(d), key=d.service) for d in deploys]
    return await enqueue(conn, items)
