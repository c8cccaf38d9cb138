"""`spectral outbox relay` runs on the event loop of spectral's long-running Kafka processes
(spectral.lifecycle.process_loop: uvloop's, where it is installed), as `spectral consume` does,
and relays on it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any
from uuid import UUID

import pytest
from typer.testing import CliRunner

import spectral.cli.outbox
from spectral.cli import app
from spectral.cli._common import run as real_run
from tests.integration.outbox.relay.support import enqueue_numbered, outbox_counts

pytestmark = pytest.mark.integration


def test_the_relay_command_relays_on_uvloop(
    monkeypatch: pytest.MonkeyPatch, spectral_env: dict[str, str], database_url: str
) -> None:
    asyncio.run(enqueue_numbered(database_url, [(UUID(int=41), n) for n in range(1, 4)]))
    loops: list[str] = []

    def recording_run(
        main: Coroutine[Any, Any, Any],
        *,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    ) -> Any:
        async def noted() -> Any:
            loops.append(type(asyncio.get_running_loop()).__module__)
            return await main

        return real_run(noted(), loop_factory=loop_factory)

    monkeypatch.setattr(spectral.cli.outbox, "run", recording_run)
    result = CliRunner().invoke(app, ["outbox", "relay", "--once"], env=spectral_env)
    assert result.exit_code == 0, result.output
    assert loops == ["uvloop"]
    assert asyncio.run(outbox_counts(database_url)) == (3, 0)
