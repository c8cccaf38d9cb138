"""The same-guarantee quix-streams peer of ``make bench``: quix-streams giving what spectral's
rule-candidates projection gives — every event recorded once in a dedup table, and a cluster's
row never overwritten by an older snapshot — inside the sink's transaction.

Written as quix-streams' documentation recommends for a destination its sinks do not cover
("Creating a Custom Sink"): an Application, a StreamingDataFrame over the topic (JSON values),
one ``apply`` that flattens the event into the row and its idempotency key, and a
``BatchingSink`` subclass whose ``write`` receives each checkpoint's batch of one partition and
writes it with psycopg2 (the driver quix-streams' own PostgreSQLSink uses) in one transaction:

1. the batch's idempotency keys into the dedup table (``ON CONFLICT DO NOTHING RETURNING``):
   only the keys it returns are new;
2. of the new events, each cluster's newest snapshot (the projection's order: last observation
   capped at the record's timestamp plus five minutes, then the last observation, the failure
   count and the hash);
3. those rows upserted with ``execute_values`` (as the PostgreSQLSink does), the update guarded
   by the same order, so an older snapshot never replaces a newer one.

The checkpoint commits the offsets after ``write`` returned (quix-streams' default: every 5 s);
a batch delivered again after a crash finds its keys in the dedup table. What it still leaves
out against spectral: the contract's check (hash, spellings, record key), dead letters, the
operator columns' protection by role, metrics.

Runs in the peers' virtual environment (benchmarks/peers/quix-requirements.txt): it imports
nothing from spectral (its set-up is quix_app.py's, shared with the other quix-streams peer).
Stops after ``--records`` records and prints one JSON line: records, the window (first record to
the end of the last sink write) and the process's CPU in it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg2
from psycopg2.extras import Json, execute_values
from quixstreams.sinks import BatchingSink, SinkBatch

from benchmarks.peers.quix_app import COLUMNS, WINDOW, arguments, connection, flat, run

SKEW = timedelta(minutes=5)

CLAIM = (
    "INSERT INTO {handled} (idempotency_key) SELECT unnest(%s::text[]) "
    "ON CONFLICT DO NOTHING RETURNING idempotency_key"
)
UPSERT = """
INSERT INTO {table} ({columns}, ordered_at) VALUES %s
ON CONFLICT (cluster_id) DO UPDATE SET {updates}, ordered_at = EXCLUDED.ordered_at
WHERE (EXCLUDED.ordered_at, EXCLUDED.last_observed_at, EXCLUDED.failure_count,
       EXCLUDED.snapshot_hash)
    > ({table}.ordered_at, {table}.last_observed_at, {table}.failure_count,
       {table}.snapshot_hash)
"""


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text)


class GuaranteedSink(BatchingSink):  # type: ignore[misc]
    """Dedup record and newest-snapshot-wins upsert, in one transaction per batch."""

    def __init__(self, connect: dict[str, Any], table: str, handled: str) -> None:
        super().__init__()
        self._connect = connect
        self._client: Any = None
        self._claim = CLAIM.format(handled=handled)
        self._upsert = UPSERT.format(
            table=table,
            columns=", ".join(COLUMNS),
            updates=", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS if c != "cluster_id"),
        )

    def setup(self) -> None:
        self._client = psycopg2.connect(**self._connect)

    def write(self, batch: SinkBatch) -> None:
        items = list(batch)
        with self._client, self._client.cursor() as cursor:
            cursor.execute(self._claim, ([item.value["idempotency_key"] for item in items],))
            fresh = {row[0] for row in cursor.fetchall()}
            newest: dict[str, tuple[tuple[datetime, datetime, int, str], dict[str, Any]]] = {}
            for item in items:
                row = item.value
                if row["idempotency_key"] not in fresh:
                    continue  # recorded before (or earlier in this batch)
                fresh.discard(row["idempotency_key"])
                last = _utc(row["last_observed_at"])
                stamp = datetime.fromtimestamp(item.timestamp / 1000, UTC)
                key = (min(last, stamp + SKEW), last, row["failure_count"], row["snapshot_hash"])
                best = newest.get(row["cluster_id"])
                if best is None or key > best[0]:
                    newest[row["cluster_id"]] = (key, row)
            if newest:
                execute_values(
                    cursor,
                    self._upsert,
                    [
                        (
                            *(Json(row[c]) if c == "evidence_bundle" else row[c] for c in COLUMNS),
                            key[0],
                        )
                        for key, row in newest.values()
                    ],
                    page_size=len(newest),
                )
        WINDOW.wrote()


def row(event: dict[str, Any]) -> dict[str, Any]:
    """The table's columns and the event's idempotency key."""
    return {**flat(event), "idempotency_key": event["idempotency_key"]}


def main() -> None:
    args = arguments("quix_guaranteed_peer.py", ("--handled", "the dedup table"))
    run(args, row, GuaranteedSink(connection(args.database_url), args.table, args.handled))


if __name__ == "__main__":
    main()
