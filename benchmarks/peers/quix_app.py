"""What the two quix-streams peers share (quix_peer.py, quix_guaranteed_peer.py): their command
line, the connection settings from the database URL, the window they report, and the
application — quix-streams' defaults, a StreamingDataFrame over the topic (JSON values), one
``apply`` that flattens each event into the table's columns, and the peer's sink.

Imported by the peers in their own virtual environment (benchmarks/peers/quix-requirements.txt,
``PYTHONPATH`` at the repository): it imports nothing from spectral, and nothing this package's
``__init__`` imports at its top may need more than that environment has.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from quixstreams import Application

COLUMNS = (
    "cluster_id",
    "snapshot_hash",
    "rule_id",
    "workspace_id",
    "severity",
    "failure_count",
    "first_observed_at",
    "last_observed_at",
    "evidence_bundle",
    "suggested_rule_stub",
)


class Window:
    """From the first record to the end of the last sink write, with the process's CPU."""

    def __init__(self) -> None:
        self.records = 0
        self.first: float | None = None
        self.cpu_first = 0.0
        self.last = 0.0
        self.cpu_last = 0.0
        self.writes = 0

    def record(self) -> None:
        """A record reached the ``apply`` (the first one opens the window)."""
        if self.first is None:
            self.first = time.time()
            self.cpu_first = time.process_time()
        self.records += 1

    def wrote(self) -> None:
        """A sink write ended."""
        self.writes += 1
        self.last = time.time()
        self.cpu_last = time.process_time()

    def report(self) -> str:
        """The one JSON line the benchmark reads (benchmarks/peers/__init__.py)."""
        return json.dumps(
            {
                "records": self.records,
                "batches": self.writes,
                "first": self.first,
                "last": self.last,
                "cpu_seconds": self.cpu_last - self.cpu_first,
            }
        )


WINDOW = Window()


def flat(event: dict[str, Any]) -> dict[str, Any]:
    """The event's payload as the table's columns (the window counts it)."""
    WINDOW.record()
    payload = event["payload"]
    return {column: payload.get(column) for column in COLUMNS}


def arguments(prog: str, *extra: tuple[str, str]) -> argparse.Namespace:
    """The peers' options; ``extra``: (``--option``, help) of a peer's own required ones."""
    parser = argparse.ArgumentParser(prog=prog)
    for option in ("--bootstrap", "--topic", "--group", "--database-url", "--table"):
        parser.add_argument(option, required=True)
    for option, help_text in extra:
        parser.add_argument(option, required=True, help=help_text)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    return parser.parse_args()


def connection(database_url: str) -> dict[str, Any]:
    """psycopg2's connection settings from the benchmark's database URL."""
    url = urlsplit(database_url)
    return {
        "host": url.hostname or "localhost",
        "port": url.port or 5432,
        "dbname": url.path.lstrip("/"),
        "user": unquote(url.username or ""),
        "password": unquote(url.password or ""),
        # e.g. passfile, sslmode, and host: a Unix-domain socket's directory (the same
        # transport as spectral's consumer, so the comparison stays fair)
        **{k: v[0] for k, v in parse_qs(url.query).items()},
    }


def run(
    args: argparse.Namespace, row: Callable[[dict[str, Any]], dict[str, Any]], sink: Any
) -> None:
    """The application over ``args.topic`` until ``args.records`` records (or idle), then the
    window's JSON line."""
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
    )
    topic = app.topic(args.topic, value_deserializer="json")
    frame = app.dataframe(topic=topic)
    frame = frame.apply(row)
    frame.sink(sink)
    app.run(count=args.records, timeout=args.idle_seconds)
    print(WINDOW.report(), flush=True)
