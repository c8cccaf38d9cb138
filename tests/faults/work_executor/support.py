"""`spectral consume work-executor` as a real process against the fake OpenAI-compatible
gateway, for the executor's fault tests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes.openai_server import FakeModelServer
from tests.integration.work.support import Harness

ROOT = Path(__file__).resolve().parents[3]
SPECTRAL = str(Path(sys.executable).with_name("spectral"))


def executor_env(
    base: dict[str, str], server: FakeModelServer, journal: Path, **settings: str
) -> dict[str, str]:
    """``base`` with the gateway, a journal directory of the test's own, a fast sweep and short
    backoffs; ``settings`` set any other ``SPECTRAL_<NAME>`` (``work_pool_size="1"``)."""
    env = {
        **base,
        "SPECTRAL_SYNTHESIZER": "openai",
        "SPECTRAL_LLM_BASE_URL": server.url,
        "SPECTRAL_LLM_API_KEY": "sk-fault-test",
        "SPECTRAL_LLM_ROUTES": json.dumps({"*": "fake-model"}),
        "SPECTRAL_WORK_SWEEP_INTERVAL_SECONDS": "0.5",
        "SPECTRAL_WORK_RETRY_BASE_SECONDS": "0.2",
        "SPECTRAL_WORK_JOURNAL_DIR": str(journal),
    }
    env.pop("SPECTRAL_WORK_CRASH_AT", None)
    env.update({f"SPECTRAL_{name.upper()}": value for name, value in settings.items()})
    return env


def start_executor(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # Logs go to a file: a pipe nobody reads fills up and blocks the process mid-write.
    with log.open("ab") as out:
        return subprocess.Popen(
            [SPECTRAL, "consume", "work-executor"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@contextmanager
def running_executor(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """An executor for the body of the block, stopped with SIGTERM at its end (which must
    exit 0)."""
    process = start_executor(env, log)
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    assert code == 0, tail(log)


async def wait_until(
    what: str, check: object, timeout: float, log: Path, interval: float = 0.1
) -> None:
    """Wait until ``check`` (a value, or a callable returning one or an awaitable) is true;
    fail with the executor log's tail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check() if callable(check) else check
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout}s\n{tail(log)}")
        await asyncio.sleep(interval)


def tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:]


@dataclass
class ExecutorRig:
    """A test's work harness and the executors it starts (one log, one journal directory)."""

    h: Harness
    base_env: dict[str, str]
    log: Path
    journal: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self, server: FakeModelServer, **settings: str) -> dict[str, str]:
        """An executor's environment against ``server`` (:func:`executor_env`)."""
        return executor_env(self.base_env, server, self.journal, **settings)

    def start(self, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """An executor; one still running at the test's end is killed then."""
        process = start_executor(env, self.log)
        self.processes.append(process)
        return process

    async def killed(self, process: subprocess.Popen[bytes], *, timeout: float = 60.0) -> None:
        """SIGKILL ``process`` and wait until it is gone."""
        os.kill(process.pid, signal.SIGKILL)
        await self.died(process, timeout=timeout)

    async def died(self, process: subprocess.Popen[bytes], *, timeout: float = 60.0) -> None:
        """Wait until ``process`` is gone, which must be by SIGKILL (its own crash point's)."""
        await wait_until("the executor died", lambda: process.poll() is not None, timeout, self.log)
        assert process.returncode == -signal.SIGKILL, tail(self.log)

    @contextmanager
    def running(self, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
        """An executor for the body of the block, stopped with SIGTERM (exit 0) at its end."""
        with running_executor(env, self.log) as process:
            yield process

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
