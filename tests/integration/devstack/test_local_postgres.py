"""The local stack's PostgreSQL: idempotent start, reuse, stop without a trace, orphan recovery."""

from __future__ import annotations

import shutil
from pathlib import Path

import asyncpg
import pytest

from spectral.devstack.postgres import LocalPostgres
from spectral.devstack.process import pid_alive

pytestmark = pytest.mark.integration


async def _answers(url: str) -> bool:
    conn = await asyncpg.connect(url)
    try:
        return bool(await conn.fetchval("SELECT current_user = 'postgres'"))
    finally:
        await conn.close()


async def test_start_twice_reuses_the_server_and_stop_leaves_no_process(tmp_path: Path) -> None:
    server = LocalPostgres(tmp_path / "state")
    try:
        url = server.ensure_running()
        pid = server.status().pid
        assert pid is not None
        assert server.ensure_running() == url
        assert server.status().pid == pid
        assert await _answers(url)
        # The URL names a 0600 passfile; the password itself is never in it.
        password = (tmp_path / "state" / "postgres.password").read_text().strip()
        assert password not in url
        assert "passfile=" in url
        assert (tmp_path / "state" / "pgpass").stat().st_mode & 0o077 == 0
        server.stop()
        assert not pid_alive(pid)
        assert not server.status().running
        # Started again: same port, same data.
        assert server.start() == url
        assert await _answers(url)
    finally:
        server.stop(wipe=True)


async def test_a_cluster_orphaned_by_a_deleted_state_directory_is_replaced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = LocalPostgres(state)
    try:
        first.ensure_running()
        shutil.rmtree(state)  # the checkout went away without `spectral dev down`
        second = LocalPostgres(state)
        url = second.ensure_running()
        assert await _answers(url)
    finally:
        LocalPostgres(state).stop(wipe=True)
