"""A consumer process for fault tests: the engine with a handler whose effect is NOT idempotent
(one appended row per applied event), so any double application shows up as a second row.

Run: python -m tests.faults.recording_consumer [IDLE]  (settings from SPECTRAL_* variables;
FAULT_HOLD_SECONDS keeps each batch's transaction open, idle, that long after its insert, so a
SIGSTOP lands inside it)
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence

import asyncpg
from prometheus_client import CollectorRegistry

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.consumer.engine import ConsumerEngine, EngineOptions
from spectral.consumer.handler import Delivery, Handler, HandlerResult
from spectral.observability.logging import configure_logging
from spectral.settings import load_settings

CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS fault_effects "
    "(idempotency_key text NOT NULL, part int NOT NULL, off bigint NOT NULL)"
)


class AppendingHandler(Handler[None]):
    name = "fault-recorder"
    event_types = (FAILURE_CLUSTER_DETECTED,)

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        await conn.execute(
            "INSERT INTO fault_effects SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[])",
            [d.idempotency_key for d in deliveries],
            [d.partition for d in deliveries],
            [d.offset for d in deliveries],
        )
        # Slow the batch a little so a SIGKILL lands inside transactions, not only between them.
        await conn.execute("SELECT pg_sleep(0.02)")
        await asyncio.sleep(float(os.environ.get("FAULT_HOLD_SECONDS", "0")))
        return HandlerResult()


async def main() -> int:
    settings = load_settings()
    configure_logging("INFO", "json")
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    idle = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    engine = ConsumerEngine(
        AppendingHandler(),
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=settings.database_url.get_secret_value(),
        options=EngineOptions(stop_when_idle=idle, max_batch=200),
        registry=CollectorRegistry(),
    )
    await engine.run()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
