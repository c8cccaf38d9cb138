"""Peers: what a user would pick instead of spectral, run on the same topic in the same run.

* ``faststream`` (faststream_peer.py): a FastStream batch subscriber doing the same dedup and
  upsert with asyncpg into the same tables, in this virtual environment (the ``bench`` extra);
* ``quix`` (quix_peer.py): quix-streams with its PostgreSQLSink upserting on the primary key, in a
  virtual environment of its own (``.venv-peers``, ``make bench`` creates it);
* ``quix_guaranteed`` (quix_guaranteed_peer.py): quix-streams with spectral's guarantees — a
  dedup table and newest-snapshot-wins in its sink's transaction — in the same environment.

Each runs as a process, sampled like spectral's consumer (CPU inside its window, the machine,
the database's backends), and prints one JSON line at the end: records, the window (first record
to the end of its last write) and its CPU. The quix-streams peers share their set-up (quix_app.py)
and import it through this package in their own environment: what this file imports at its top
must be there too (the standard library).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the quix-streams peers import this package in their own environment
    from benchmarks.processes import GroupRun, ProcessRun, Servers

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
"""The quix-streams peer's interpreter (benchmarks/peers/quix-requirements.txt)."""


@dataclass(frozen=True)
class PeerCommand:
    name: str
    argv: tuple[str, ...]


def faststream(
    bootstrap: str, topic: str, group: str, database_url: str, records: int
) -> PeerCommand:
    return PeerCommand(
        "faststream",
        (
            sys.executable,
            "-m",
            "benchmarks.peers.faststream_peer",
            *_options(
                bootstrap=bootstrap,
                topic=topic,
                group=group,
                database_url=database_url,
                records=records,
            ),
        ),
    )


def quix(
    *, bootstrap: str, topic: str, group: str, database_url: str, table: str, records: int
) -> PeerCommand | None:
    """None when the peers' virtual environment is missing (``make bench`` creates it)."""
    if not PEERS_PYTHON.exists():
        return None
    return PeerCommand(
        "quix",
        (
            str(PEERS_PYTHON),
            str(HERE / "quix_peer.py"),
            *_options(
                bootstrap=bootstrap,
                topic=topic,
                group=group,
                database_url=database_url,
                table=table,
                records=records,
            ),
        ),
    )


def quix_guaranteed(
    *,
    bootstrap: str,
    topic: str,
    group: str,
    database_url: str,
    table: str,
    handled: str,
    records: int,
) -> PeerCommand | None:
    """None when the peers' virtual environment is missing (``make bench`` creates it)."""
    if not PEERS_PYTHON.exists():
        return None
    return PeerCommand(
        "quix_guaranteed",
        (
            str(PEERS_PYTHON),
            str(HERE / "quix_guaranteed_peer.py"),
            *_options(
                bootstrap=bootstrap,
                topic=topic,
                group=group,
                database_url=database_url,
                table=table,
                handled=handled,
                records=records,
            ),
        ),
    )


def _options(**values: object) -> tuple[str, ...]:
    """``--name value`` for each keyword (``database_url`` -> ``--database-url``)."""
    return tuple(
        part
        for name, value in values.items()
        for part in (f"--{name.replace('_', '-')}", str(value))
    )


async def run_peer(
    peer: PeerCommand,
    *,
    env: dict[str, str],
    log_dir: Path,
    limit_seconds: float,
    servers: Servers | None,
    database_url: str,
    name: str | None = None,
) -> GroupRun:
    """Run one peer to its end; its window and record count come from its JSON line.
    ``name``: of its log and group run (the peer's own by default)."""
    from benchmarks.processes import run_commands  # noqa: PLC0415 - see the imports above

    run = await run_commands(
        [peer.argv],
        name=name or peer.name,
        env={**env, "PYTHONPATH": str(ROOT)},
        log_dir=log_dir,
        limit_seconds=limit_seconds,
        servers=servers,
        database_url=database_url,
    )
    for member in run.runs:
        _read_result(member)
    return run


def _read_result(run: ProcessRun) -> None:
    for line in reversed(run.log.read_text(encoding="utf-8", errors="replace").splitlines()):
        if not line.startswith("{"):
            continue
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if "records" in result and result.get("first") is not None:
            run.records = int(result["records"])
            run.batches = int(result["batches"])
            run.first_fetch = float(result["first"])
            run.last_commit = float(result["last"])
            return
