"""Helpers the test suites share (no fixtures here: see conftest.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit


def with_database(url: str, database: str) -> str:
    """``url`` pointing at another database on the same server (query string kept)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def unique_name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 30.0, interval: float = 0.2
) -> None:
    """Await ``check`` until it returns True; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)
