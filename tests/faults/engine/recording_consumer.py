"""A consumer process for fault tests: the engine with a handler whose effect is NOT idempotent
(one appended row per applied event), so any double application shows up as a second row.

Run: python -m tests.faults.engine.recording_consumer [IDLE]  (settings from SPECTRAL_* variables;
FAULT_HOLD_SECONDS keeps each batch's transaction open, idle, that long after its insert, so a
SIGSTOP lands inside it; FAULT_HOLD_COMMIT=PATH holds the first offset commit forever, after the
batch's database commit, once it wrote the offsets it was given to PATH, so a SIGKILL lands
between a batch's database commit and its offset commit; with FAULT_HOLD_NEXT_SECONDS the
transactions after that one are held open that long: the SIGKILL lands while the next batch's
transaction runs)
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncpg
from prometheus_client import CollectorRegistry

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Delivery, Handler, HandlerResult
from spectral.kafka.transport import offsets_after
from spectral.lifecycle import process_loop
from spectral.observability.logging import configure_logging
from spectral.observability.progress import EngineHook
from spectral.settings import load_settings

CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS fault_effects "
    "(idempotency_key text NOT NULL, part int NOT NULL, off bigint NOT NULL)"
)


class AppendingHandler(Handler[None]):
    name = "fault-recorder"
    event_types = (FAILURE_CLUSTER_DETECTED,)

    def __init__(self) -> None:
        self.hold_seconds = float(os.environ.get("FAULT_HOLD_SECONDS", "0"))

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
        await asyncio.sleep(self.hold_seconds)
        return HandlerResult()


class HeldCommit(EngineHook):
    """The consumer's first offset commit writes its offsets to ``marker``, holds the handler's
    later transactions open ``then_hold`` seconds, and never returns."""

    def __init__(self, marker: Path, handler: AppendingHandler, then_hold: float) -> None:
        self.marker = marker
        self.handler = handler
        self.then_hold = then_hold

    async def started(self, source: Any, pool: Any) -> None:  # noqa: ARG002
        async def held(records: Sequence[Any]) -> Mapping[Any, int]:
            self.handler.hold_seconds = self.then_hold
            written = self.marker.with_name(self.marker.name + ".part")
            written.write_text(str(sum(offsets_after(records).values())))
            written.replace(self.marker)  # whole, or not there
            await asyncio.Event().wait()
            return {}

        source.commit = held


async def main() -> int:
    settings = load_settings()
    configure_logging("INFO", "json")
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    idle = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    handler = AppendingHandler()
    held = os.environ.get("FAULT_HOLD_COMMIT")
    then_hold = float(os.environ.get("FAULT_HOLD_NEXT_SECONDS", "0"))
    engine = ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=settings.database_url.get_secret_value(),
        options=EngineOptions(
            stop_when_idle=idle,
            max_batch=200,
            batch_growth=int(os.environ.get("FAULT_BATCH_GROWTH", "1")),
            commit_interval=float(os.environ.get("FAULT_COMMIT_INTERVAL", "0")),
        ),
        registry=CollectorRegistry(),
        hook=HeldCommit(Path(held), handler, then_hold) if held else None,
    )
    await engine.run()
    return 0


if __name__ == "__main__":
    # the event loop of `spectral consume`: the faults are those of the loop it runs on
    with asyncio.Runner(loop_factory=process_loop()) as runner:
        sys.exit(runner.run(main()))
