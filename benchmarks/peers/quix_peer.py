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
nothing from spectral (its set-up is quix_app.py's, shared with the same-guarantee peer). Stops
after ``--records`` records and prints one JSON line: records, the window (first record to the
end of the last sink write) and the process's CPU in it.
"""

from __future__ import annotations

from typing import Any

from quixstreams.sinks.community.postgresql import PostgreSQLSink

from benchmarks.peers.quix_app import WINDOW, arguments, connection, flat, run


class TimedSink(PostgreSQLSink):  # type: ignore[misc]
    """The documented sink; only the end of each write is noted (for the window)."""

    def write(self, batch: Any) -> None:
        super().write(batch)
        WINDOW.wrote()


def main() -> None:
    args = arguments("quix_peer.py")
    sink = TimedSink(
        **connection(args.database_url),
        table_name=args.table,
        schema_auto_update=False,
        primary_key_columns="cluster_id",
        upsert_on_primary_key=True,
        include_metadata=False,
    )
    run(args, flat, sink)


if __name__ == "__main__":
    main()
