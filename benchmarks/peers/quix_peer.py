"""The quix-streams peer of ``make bench``: the failure-cluster snapshots into PostgreSQL the way
quix-streams' documentation shows it — an Application, a StreamingDataFrame over the topic (JSON
values), one ``apply`` that flattens the event into the table's columns, and the
``PostgreSQLSink`` with ``upsert_on_primary_key=True`` on ``cluster_id``; every other setting is
quix-streams' default (checkpoints every 5 s, the sink writing each checkpoint's rows with
``execute_values``).

It writes a table of the projection's shape (the same data columns and types, created by the
benchmark; ``schema_auto_update=False``, ``include_metadata=False``). The sink's upsert is last
write wins and nothing is deduplicated, validated or dead-lettered: the benchmark counts the
clusters it leaves at a stale snapshot.

Runs in a virtual environment of its own (benchmarks/peers/quix-requirements.txt): it imports
nothing from spectral. Stops after ``--records`` records and prints one JSON line: records, the
window (first record to the end of the last sink write) and the process's CPU in it.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from quixstreams import Application
from quixstreams.sinks.community.postgresql import PostgreSQLSink

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
    def __init__(self) -> None:
        self.records = 0
        self.first: float | None = None
        self.cpu_first = 0.0
        self.last = 0.0
        self.cpu_last = 0.0
        self.writes = 0


WINDOW = Window()


class TimedSink(PostgreSQLSink):  # type: ignore[misc]
    """The documented sink; only the end of each write is noted (for the window)."""

    def write(self, batch: Any) -> None:
        super().write(batch)
        WINDOW.writes += 1
        WINDOW.last = time.time()
        WINDOW.cpu_last = time.process_time()


def row(event: dict[str, Any]) -> dict[str, Any]:
    if WINDOW.first is None:
        WINDOW.first = time.time()
        WINDOW.cpu_first = time.process_time()
    WINDOW.records += 1
    payload = event["payload"]
    return {column: payload.get(column) for column in COLUMNS}


def main() -> None:
    parser = argparse.ArgumentParser(prog="quix_peer.py")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    args = parser.parse_args()

    url = urlsplit(args.database_url)
    extra = {k: v[0] for k, v in parse_qs(url.query).items()}  # e.g. passfile, sslmode
    sink = TimedSink(
        host=url.hostname or "localhost",
        port=url.port or 5432,
        dbname=url.path.lstrip("/"),
        user=unquote(url.username or ""),
        password=unquote(url.password or ""),
        table_name=args.table,
        schema_auto_update=False,
        primary_key_columns="cluster_id",
        upsert_on_primary_key=True,
        include_metadata=False,
        **extra,
    )
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
    print(
        json.dumps(
            {
                "records": WINDOW.records,
                "batches": WINDOW.writes,
                "first": WINDOW.first,
                "last": WINDOW.last,
                "cpu_seconds": WINDOW.cpu_last - WINDOW.cpu_first,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
