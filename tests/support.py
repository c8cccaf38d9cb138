"""Helpers the test suites share (no fixtures here: see conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import asyncpg

from spectral.db.migrate import MIGRATIONS_DIR
from spectral.settings import socket_directory, url_port


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


def as_login(url: str, login: str, password: str) -> str:
    """``url`` with another login (and no passfile of the original login: of its query string
    only the socket directory of a Unix-domain socket URL is kept)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{login}:{password}@{host}", query=transport(url)))


def transport(url: str) -> str:
    """The part of ``url``'s query string that says where the server is (``host=DIR&port=P``
    of a Unix-domain socket URL), or ""."""
    directory = socket_directory(url)
    if directory is None:
        return ""
    return urlencode({"host": directory, "port": url_port(url) or 5432}, safe="/")


@asynccontextmanager
async def database_login(
    database_url: str, *roles: str, inherit: bool = True
) -> AsyncIterator[tuple[str, str]]:
    """A new database login granted ``roles`` (none: no grant at all), as (name, URL); dropped
    afterwards with whatever it owns. Roles are server-wide, so the name is unique. Without
    ``inherit`` the login holds no privilege of its roles until it assumes one."""
    name = unique_name("spectral_login_")
    password = f"pw-{name}"
    owner = await asyncpg.connect(database_url)
    try:
        grant = f" IN ROLE {', '.join(roles)}" if roles else ""
        inherits = "" if inherit else " NOINHERIT"
        await owner.execute(f"CREATE ROLE {name} LOGIN{inherits} PASSWORD '{password}'{grant}")
        yield name, as_login(database_url, name, password)
    finally:
        await owner.execute(f"DROP OWNED BY {name}")
        await owner.execute(f"DROP ROLE IF EXISTS {name}")
        await owner.close()


async def no_task_left_since(before: set[asyncio.Task[Any]], timeout: float = 10.0) -> None:
    """Fail unless every task started since ``before`` ends within ``timeout`` seconds: what a
    stop cancelled ends within a few turns of the loop; what it leaked never does."""

    def left() -> list[object]:
        return [t.get_coro() for t in asyncio.all_tasks() if t not in before and not t.done()]

    async def all_ended() -> bool:
        return not left()

    with contextlib.suppress(AssertionError):
        await eventually(all_ended, timeout=timeout, interval=0.05)
    assert left() == []


def migrations_before(migration: str, directory: Path) -> Path:
    """``directory`` filled with the migrations numbered before the one whose name ends with
    ``migration`` (e.g. ``"_bounded_state.sql"``: its number is the integrator's to choose), to
    build a database at the schema that migration converts."""
    files = [p for p in MIGRATIONS_DIR.iterdir() if p.name.endswith(".sql")]
    [ours] = [p.name for p in files if p.name.endswith(migration)]
    for path in files:
        if path.name < ours:
            (directory / path.name).write_text(path.read_text())
    return directory


@asynccontextmanager
async def empty_database(server_url: str, prefix: str) -> AsyncIterator[str]:
    """An empty database of the caller's own on the server of ``server_url``, dropped after."""
    name = unique_name(prefix)
    admin = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield with_database(server_url, name)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


_IN_PROCESS = threading.Lock()


def spectral_in_process(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`spectral ARGS` run as its console script runs it (``spectral.cli.main``), in this
    process: with ``env`` as the whole environment, its standard output and error captured and
    its exit code read from its ``SystemExit`` (an exception it lets escape is exit 1 with the
    traceback on stderr, as Python would print it). A process of its own costs ~0.4 s of CPU,
    most of it imports this process has already done, and the suite runs commands hundreds of
    times; the tests of what a process adds (exit codes, what a command imports, the installed
    script: tests/unit/cli/test_shell.py, tests/integration/cli/) still start it.

    It runs in a thread of its own (its event loop is a new one even when the caller's loop is
    running), one command at a time per process."""
    from spectral.cli import main  # noqa: PLC0415 - the command's own imports, when first run

    out, err = io.StringIO(), io.StringIO()
    code = 0

    def command() -> None:
        nonlocal code
        try:
            main()
        except SystemExit as exc:
            if isinstance(exc.code, str):
                err.write(exc.code + "\n")
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException:  # noqa: BLE001 - what an uncaught exception does to a process
            traceback.print_exc(file=err)
            code = 1

    with _IN_PROCESS:
        saved_env, saved_argv = dict(os.environ), sys.argv
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["spectral", *args]
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                thread = threading.Thread(target=command, name="spectral-cli")
                thread.start()
                thread.join()
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            sys.argv = saved_argv
    return subprocess.CompletedProcess(["spectral", *args], code, out.getvalue(), err.getvalue())


def plan_rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans produced or threw away, summed over every node and every run of it
    (EXPLAIN gives both per run: a scan run once per row of another — a nested loop over a CTE,
    a correlated subquery — counts rows x runs). A Materialize node counts as a scan: the rows
    it stored are read again on each of its runs (the inner side of a nested loop whose
    condition no hash or merge join can use, a subquery too big to hash)."""
    node = plan
    own = 0
    kind = node.get("Node Type", "")
    if "Scan" in kind or kind == "Materialize":
        per_run = int(node.get("Actual Rows", 0)) + int(node.get("Rows Removed by Filter", 0))
        own = per_run * int(node.get("Actual Loops", 1))
    return own + sum(plan_rows_read(child) for child in node.get("Plans", []))


async def explained(conn: asyncpg.Connection, sql: str, args: Sequence[object]) -> dict[str, Any]:
    """The executed plan of ``sql``, its changes rolled back."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        [row] = await conn.fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
    finally:
        await transaction.rollback()
    plan: dict[str, Any] = json.loads(row[0])[0]["Plan"]
    return plan
