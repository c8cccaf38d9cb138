"""The database role story of a plugin's projection: its own role, a member of
spectral_consumer, registered in core.consumer_roles — row-level security keeps its dedup rows
to its consumer names, and it may write core.dead_letters. A role that lacks a grant or a
registration stops the consumer (exit 2) instead of dead-lettering every record."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from contracts import EventRegistry
from spectral.db.connect import Conn, connect
from spectral.db.migrate import migrate
from spectral.dlq import store
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Delivery, Handler, HandlerResult, Outcome, Rejection
from spectral.errors import ConfigurationError
from spectral.kafka.dlq import DeadLetter
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.plugins import EventSource, MigrationTrack, registry_of
from spectral.settings import Settings
from tests.integration.plugins.test_plugin_migrations import NOTES_0001
from tests.kafka_support import end_offsets, publish, read_all
from tests.unit.plugins.fake_plugin import NOTE_ADDED, Note

pytestmark = pytest.mark.integration

ROLE: Final = "notes_projector"
EVENTS: Final[EventRegistry] = registry_of([EventSource("notes", (NOTE_ADDED,))])


class NotesHandler(Handler[None]):
    event_types = (NOTE_ADDED.event_type,)
    database_role = ROLE

    def __init__(self, name: str = "notes") -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def apply(self, conn: Conn, deliveries: Sequence[Delivery]) -> HandlerResult[None]:
        result: HandlerResult[None] = HandlerResult()
        keep = []
        for delivery in deliveries:
            note: Note = delivery.envelope.payload
            if note.text == "refuse me":
                result.rejected.append(Rejection(delivery, "refused_text", "the text says so"))
            else:
                keep.append(note)
        await conn.executemany(
            "INSERT INTO notes.notes (note_id, body) VALUES ($1, $2)",
            [(n.note_id, n.text) for n in keep],
        )
        return result


async def _with_notes_plugin(database_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "0001_notes.sql").write_text(NOTES_0001)
    await migrate(database_url, plugins=[MigrationTrack("notes", folder)])


async def _publish_notes(bootstrap: str, prefix: str, texts: Sequence[str]) -> str:
    topic = topic_for(NOTE_ADDED.event_type, prefix)
    records = []
    for number, text in enumerate(texts):
        envelope = NOTE_ADDED.envelope(Note(note_id=f"n-{number}", text=text))
        records.append((f"n-{number}".encode(), EVENTS.encode(envelope)))
    await publish(bootstrap, topic, records)
    return topic


def _engine(handler: Handler[None], settings: Settings, bootstrap: str, url: str) -> ConsumerEngine:
    return ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=bootstrap,
        database_url=url,
        options=EngineOptions(stop_when_idle=2.0),
        registry=CollectorRegistry(),
        events=EVENTS,
    )


async def test_a_plugin_role_applies_records_and_dead_letters_under_its_own_consumer(
    settings: Settings, kafka_bootstrap: str, database_url: str, tmp_path: Path
) -> None:
    await _with_notes_plugin(database_url, tmp_path)
    topic = await _publish_notes(
        kafka_bootstrap, settings.topic_prefix, ["one", "refuse me", "three"]
    )
    summary = await _engine(NotesHandler(), settings, kafka_bootstrap, database_url).run()
    assert summary.counts[Outcome.APPLIED] == 2
    assert summary.counts[Outcome.DEAD_LETTERED] == 1
    [letter] = await read_all(kafka_bootstrap, dlq_topic(topic))
    assert letter.header("dlq.reason") == "handler_rejected"
    assert letter.header("dlq.consumer") == "notes"

    conn = await connect(database_url, role=ROLE)
    try:
        # Row-level security: the role sees its own consumer's dedup rows, nobody else's.
        seen = await conn.fetch("SELECT DISTINCT consumer FROM core.event_handled")
        assert [r["consumer"] for r in seen] == ["notes"]
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
            await conn.execute(
                "INSERT INTO core.event_handled (consumer, dedup_key, event_id, outcome, "
                "source_partition, source_offset, slot) VALUES ('rule-candidates', 'k', "
                "gen_random_uuid(), 'applied', 0, 0, 0)"
            )
        # The dead-letter table, the engine's last resort, takes the role's rows.
        await store.record(
            conn,
            [
                store.Refused(
                    DeadLetter(
                        reason="handler_rejected",
                        detail="d",
                        source_topic=topic,
                        source_partition=0,
                        source_offset=99,
                        consumer="notes",
                        key=b"k",
                        value=b"v",
                    ),
                    "refused by the broker",
                )
            ],
        )
    finally:
        await conn.close()


async def test_an_unregistered_consumer_stops_with_a_configuration_error_and_loses_nothing(
    settings: Settings, kafka_bootstrap: str, database_url: str, tmp_path: Path
) -> None:
    await _with_notes_plugin(database_url, tmp_path)
    topic = await _publish_notes(kafka_bootstrap, settings.topic_prefix, ["one", "two"])
    engine = _engine(NotesHandler("notes-unregistered"), settings, kafka_bootstrap, database_url)
    with pytest.raises(ConfigurationError, match=r"core.consumer_roles VALUES \('notes-unreg"):
        await engine.run()
    assert await end_offsets(kafka_bootstrap, dlq_topic(topic)) in ({}, {0: 0})  # no dead letter
    admin = await asyncpg.connect(database_url)
    try:
        assert await admin.fetchval("SELECT count(*) FROM notes.notes") == 0
    finally:
        await admin.close()
