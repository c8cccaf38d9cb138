"""The local stack's PostgreSQL: idempotent start, reuse, stop without a trace, orphan recovery."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest

from spectral import devstack
from spectral.devstack.postgres import (
    OWNER_FILE,
    LocalPostgres,
    find_bin_dir,
    orphans,
    rotate_log,
    wipe_orphan,
)
from spectral.devstack.process import pid_alive
from spectral.errors import ConfigurationError
from spectral.settings import load_settings, socket_directory, url_port

pytestmark = pytest.mark.integration


async def _client_addr(url: str) -> str | None:
    conn = await asyncpg.connect(url)
    try:
        addr = await conn.fetchval("SELECT host(inet_client_addr())")
    finally:
        await conn.close()
    return None if addr is None else str(addr)


def url_over_tcp(url: str) -> str:
    """The stack's socket URL as the same server's loopback URL."""
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items() if k not in {"host", "port"}}
    netloc = f"{parts.username}@127.0.0.1:{url_port(url)}"
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="/")))


def test_a_state_directory_too_deep_for_a_socket_stops_the_start_with_the_way_out(
    tmp_path: Path,
) -> None:
    server = LocalPostgres(tmp_path / "state")
    server.socket_dir = tmp_path / ("d" * 100)
    with pytest.raises(ConfigurationError, match="shorter directory") as refused:
        server.ensure_running()
    assert "SPECTRAL_STATE_DIR" in str(refused.value)
    assert "the system allows 107" in str(refused.value)
    assert not server.data_dir.exists()  # refused before initdb


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
        # Through the socket beside the data; the loopback port answers too, and both URLs
        # are the stack's own.
        assert socket_directory(url) == str(server.socket_dir)
        assert await _client_addr(url) is None  # a Unix-domain socket has no address
        libpq = subprocess.run(  # libpq (psql, psycopg) reads the URL and the passfile too
            [str(find_bin_dir() / "psql"), url, "-tAc", "SELECT inet_client_addr() IS NULL"],
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("PG")},
            check=False,
        )
        assert (libpq.returncode, libpq.stdout.strip()) == (0, "t"), libpq.stderr
        tcp = url_over_tcp(url)
        assert await _client_addr(tcp) == "127.0.0.1"
        assert server.owns(url)
        assert server.owns(tcp)
        assert not server.owns(url.replace(f"host={server.socket_dir}", "host=/elsewhere"))
        server.stop()
        assert not pid_alive(pid)
        assert not server.status().running
        # Started again: same port, same data.
        assert server.start() == url
        assert await _answers(url)
    finally:
        server.stop(wipe=True)


def test_two_processes_starting_the_stopped_server_at_once_take_turns(tmp_path: Path) -> None:
    """Two test workers (or two terminals) run `dev up` on a stopped stack at the same time: one
    starts the server, the other finds it running; neither fails on the other's lock file."""
    state = tmp_path / "state"
    server = LocalPostgres(state)
    try:
        url = server.ensure_running()
        server.stop()
        # Each process imports first, then waits for the same instant: the starts overlap.
        script = (
            "import sys, time; from pathlib import Path; "
            "from spectral.devstack.postgres import LocalPostgres; "
            "time.sleep(max(0.0, float(sys.argv[2]) - time.time())); "
            "print(LocalPostgres(Path(sys.argv[1])).ensure_running())"
        )
        at = str(time.time() + 8)
        starts = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(state), at],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        answers = [start.communicate(timeout=180) for start in starts]
        assert [start.returncode for start in starts] == [0, 0, 0], answers
        assert {out.strip() for out, _ in answers} == {url}
        assert server.status().running
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


async def test_exported_settings_name_the_stacks_own_server_which_up_restarts(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    """After `eval "$(spectral dev up)"` the settings name the stack's servers: `dev status`
    still reports the server's process, and a second `dev up` starts it again when it stopped
    (it used to exit 0 with the database down, taking the exported URL for an external one)."""
    state = tmp_path / "state"
    server = LocalPostgres(state)
    try:
        url = server.ensure_running()
        exported = load_settings(database_url=url, kafka_bootstrap=kafka_bootstrap, state_dir=state)
        assert devstack.owns_postgres(exported)
        assert not devstack.owns_kafka(exported)  # the shared broker is not this stack's
        assert devstack.status(exported).postgres.startswith("running (pid ")
        server.stop()
        assert devstack.status(exported).postgres.startswith("stopped")
        assert devstack.up(exported).database_url == url
        assert server.status().running
        assert await _answers(url)
        elsewhere = load_settings(
            database_url=url.replace(str(state), str(tmp_path / "other")), state_dir=state
        )
        assert not devstack.owns_postgres(elsewhere)  # another passfile: someone else's
    finally:
        server.stop(wipe=True)


def test_a_grown_log_is_rotated_before_a_start(tmp_path: Path) -> None:
    log = tmp_path / "postgres.log"
    log.write_bytes(b"x" * 100)
    assert not rotate_log(log, limit=1000)
    log.write_bytes(b"y" * 2000)
    (tmp_path / "postgres.log.1").write_bytes(b"older")
    assert rotate_log(log, limit=1000)
    assert not log.exists()
    assert (tmp_path / "postgres.log.1").read_bytes() == b"y" * 2000


async def test_a_cluster_whose_checkout_is_gone_is_listed_and_wiped(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    gone = tmp_path / "removed-checkout" / ".spectral"
    live = tmp_path / "live-checkout" / ".spectral"
    live.mkdir(parents=True)
    for name, state in (("aaaa", gone), ("bbbb", live)):
        (shared / name / "data").mkdir(parents=True)
        (shared / name / OWNER_FILE).write_text(f"{state}\n")
    (shared / "cccc" / "data").mkdir(parents=True)  # names no stack: not ours to judge
    found = orphans(shared)
    assert [(o.root.name, o.state_dir, o.pid) for o in found] == [("aaaa", gone, None)]
    wipe_orphan(found[0])
    assert sorted(p.name for p in shared.iterdir()) == ["bbbb", "cccc"]


async def test_the_stack_records_which_checkout_its_shared_cluster_serves(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("the cluster lives under /var/lib/spectral only when run as root (as CI)")
    state = tmp_path / "state"
    server = LocalPostgres(state)
    try:
        server.ensure_running()
        assert (server.data_dir.parent / OWNER_FILE).read_text().strip() == str(state.resolve())
        assert server.data_dir.parent not in {o.root for o in orphans()}
    finally:
        server.stop(wipe=True)
