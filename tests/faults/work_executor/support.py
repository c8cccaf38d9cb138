"""`spectral consume work-executor` as a real process against the fake OpenAI-compatible
gateway, for the executor's fault tests."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.fakes.openai_server import FakeModelServer

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
