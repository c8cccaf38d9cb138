"""The rig of the executor's kill tests (support.py's :class:`ExecutorRig`): the work topic, the
harness and a running outbox relay on the test's database; the executors a test started are
killed at its end if they still run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from spectral.settings import Settings
from tests.faults.work_executor.support import ExecutorRig
from tests.integration.work.kafka_support import create_work_topic, relay_running
from tests.integration.work.support import harness


@pytest.fixture
async def rig(
    *,
    database_url: str,
    settings: Settings,
    kafka_bootstrap: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
) -> AsyncIterator[ExecutorRig]:
    await create_work_topic(kafka_bootstrap, settings.topic_prefix)
    async with (
        harness(database_url) as h,
        relay_running(settings, kafka_bootstrap, database_url),
    ):
        rig = ExecutorRig(h, spectral_env, tmp_path / "executor.log", tmp_path / "journal")
        try:
            yield rig
        finally:
            rig.stop_all()
