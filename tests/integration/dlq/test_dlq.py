"""Dead letters: list, show, redrive — on the real broker and database.

The realistic case: a projection of cluster snapshots per workspace, whose rows reference
``workspaces`` by foreign key. A snapshot of a workspace not registered yet fails its insert
(a data error: the engine isolates it and dead-letters it as ``handler_error``). Redriven before
the workspace exists, it fails again and returns to the dead-letter topic with its history;
redriven after the workspace is registered, it applies — once.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from contracts import FAILURE_CLUSTER_DETECTED, EventEnvelope
from spectral.dlq.records import scan_dead_letters
from spectral.dlq.redrive import redrive
from spectral.dlq.repository import connect_operator
from spectral.engine.handler import Delivery, Handler, HandlerResult, Outcome
from spectral.kafka.dlq import history_of
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.integration.replay.support import (
    execute,
    fetchval,
    run_live,
    spectral_cli,
    spectral_json,
    spectral_ok,
)
from tests.kafka_support import (
    PRODUCING,
    TRANSPORTS,
    ReadRecord,
    cluster_event,
    create_topics,
    publish,
    publish_envelopes,
    read_all,
)

pytestmark = pytest.mark.integration

KNOWN = uuid.UUID(int=2)
LATE = uuid.UUID(int=3)


class WorkspaceProjection(Handler[None]):
    """One row per applied snapshot, referencing its workspace (foreign key)."""

    name = "workspace-projection"
    event_types = (FAILURE_CLUSTER_DETECTED,)

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        await conn.execute(
            "INSERT INTO ws_snapshots (idempotency_key, workspace_id) "
            "SELECT * FROM unnest($1::text[], $2::uuid[])",
            [d.idempotency_key for d in deliveries],
            [d.envelope.payload.workspace_id for d in deliveries],
        )
        return HandlerResult()


@pytest.fixture
async def workspace_tables(database_url: str) -> None:
    await execute(database_url, "CREATE TABLE workspaces (workspace_id uuid PRIMARY KEY)")
    await execute(
        database_url,
        "CREATE TABLE ws_snapshots (idempotency_key text NOT NULL, "
        "workspace_id uuid NOT NULL REFERENCES workspaces)",
    )
    await execute(database_url, "INSERT INTO workspaces VALUES ($1)", KNOWN)


async def _applied(database_url: str, key: str) -> int:
    count: int = await fetchval(
        database_url, "SELECT count(*) FROM ws_snapshots WHERE idempotency_key = $1", key
    )
    return count


async def _redrive(settings: Settings, topic: str, **options: Any) -> Any:
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    conn = await connect_operator(settings, settings.database_url.get_secret_value())
    try:
        return await redrive(settings, settings.kafka_bootstrap, conn, topic=topic, **options)
    finally:
        await conn.close()


async def _dead_lettered(
    settings: Settings, kafka_bootstrap: str
) -> tuple[EventEnvelope[Any], ReadRecord]:
    """Two snapshots applied, one of the unknown workspace and one poison record dead-lettered."""
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    dlq = dlq_topic(topic)
    await create_topics(kafka_bootstrap, [topic, dlq], partitions=1)
    ok: list[EventEnvelope[Any]] = [cluster_event(workspace_id=KNOWN) for _ in range(2)]
    late = cluster_event(workspace_id=LATE)
    await publish_envelopes(kafka_bootstrap, topic, [ok[0], late, ok[1]])
    await publish(kafka_bootstrap, topic, [(b"k", b"{not json")])

    first = await run_live(settings, WorkspaceProjection())
    assert first.counts[Outcome.APPLIED] == 2
    assert first.counts[Outcome.DEAD_LETTERED] == 2
    [fk_letter, poison] = await read_all(kafka_bootstrap, dlq)
    assert fk_letter.header("dlq.reason") == "handler_error"
    assert "foreign key" in (fk_letter.header("dlq.detail") or "")
    assert poison.header("dlq.reason") == "not_json"
    return late, fk_letter


@pytest.mark.usefixtures("workspace_tables")
async def test_list_and_show_decode_what_they_can(
    settings: Settings, kafka_bootstrap: str, spectral_env: dict[str, str]
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    dlq = dlq_topic(topic)
    late, _ = await _dead_lettered(settings, kafka_bootstrap)
    # list / show through the CLI: reasons, the decoded original, the undecodable one.
    listed = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "list", "--topic", topic, "--json"
    )
    assert [(r["offset"], r["reason"], r["redriven"]) for r in listed] == [
        (0, "handler_error", False),
        (1, "not_json", False),
    ]
    only = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "list", "--topic", dlq, "--reason", "not_json", "--json"
    )
    assert [r["offset"] for r in only] == [1]
    shown = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "show", "--topic", topic, "--offset", "0", "--json"
    )
    assert shown["envelope"]["idempotency_key"] == late.idempotency_key
    assert shown["headers"]["dlq.source.offset"] == "1"
    assert [h["reason"] for h in shown["history"]] == ["handler_error"]
    bad = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "show", "--topic", topic, "--offset", "1", "--json"
    )
    assert bad["envelope"] is None
    assert bad["undecodable"].startswith("not_json")
    assert bad["value_preview"] == "{not json"
    # The same for a person on a terminal.
    table = await asyncio.to_thread(spectral_ok, spectral_env, "dlq", "list", "--topic", topic)
    assert "handler_error" in table
    assert "not_json" in table
    text = await asyncio.to_thread(
        spectral_ok, spectral_env, "dlq", "show", "--topic", topic, "--offset", "1"
    )
    assert "original does not decode" in text
    assert "{not json" in text
    text = await asyncio.to_thread(
        spectral_ok, spectral_env, "dlq", "show", "--topic", topic, "--offset", "0"
    )
    assert late.idempotency_key in text
    plan = await asyncio.to_thread(
        spectral_ok, spectral_env, "dlq", "redrive", "--topic", topic, "--dry-run"
    )
    assert "would redrive 2 of 2 dead letters" in plan


@pytest.mark.usefixtures("workspace_tables")
@pytest.mark.parametrize("transport", PRODUCING)
async def test_a_dead_letter_fails_again_with_its_history_then_applies_once_after_the_fix(
    settings: Settings,
    kafka_bootstrap: str,
    database_url: str,
    spectral_env: dict[str, str],
    transport: str,
) -> None:
    settings = settings.replace(**TRANSPORTS[transport])
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    dlq = dlq_topic(topic)
    late, fk_letter = await _dead_lettered(settings, kafka_bootstrap)

    # A dry run sends nothing and records nothing.
    planned = await _redrive(settings, topic, reason="handler_error", dry_run=True)
    assert [(r.dlq_offset, r.partition) for r in planned.redriven] == [(0, None)]
    assert len(await read_all(kafka_bootstrap, topic)) == 4

    # Redriven before the cause is fixed: it fails again and returns with its history.
    sent = await _redrive(settings, topic, reason="handler_error")
    assert [(r.dlq_offset, r.partition, r.offset) for r in sent.redriven] == [(0, 0, 4)]
    assert sent.skipped == {"other_reason": 1}
    redriven_record = (await read_all(kafka_bootstrap, topic))[4]
    assert redriven_record.value == fk_letter.value
    assert redriven_record.key == fk_letter.key
    assert redriven_record.header("dlq.redriven_from") == f"{dlq}:0:0"
    again = await run_live(settings, WorkspaceProjection())
    assert again.counts[Outcome.DEAD_LETTERED] == 1
    letters = await read_all(kafka_bootstrap, dlq)
    assert len(letters) == 3
    returned = letters[2]
    assert returned.value == fk_letter.value
    assert returned.header("dlq.source.offset") == "4"
    assert json.loads(returned.header("dlq.history") or "[]")[0]["source"] == f"{topic}:0:1"
    history = history_of(returned.headers)
    assert [h["reason"] for h in history] == ["handler_error", "handler_error"]
    assert [h["source"] for h in history] == [f"{topic}:0:1", f"{topic}:0:4"]

    # The cause fixed: the workspace is registered. The first dead letter is never redriven
    # again; the one that returned is, and applies once.
    await execute(database_url, "INSERT INTO workspaces VALUES ($1)", LATE)
    fixed = await _redrive(settings, topic, reason="handler_error")
    assert [r.dlq_offset for r in fixed.redriven] == [2]
    assert fixed.skipped == {"already_redriven": 1, "other_reason": 1}
    applied = await run_live(settings, WorkspaceProjection())
    assert applied.counts[Outcome.APPLIED] == 1
    assert await _applied(database_url, late.idempotency_key) == 1

    # Nothing left to redrive for that reason; the poison record, redriven, just returns.
    assert (await _redrive(settings, topic, reason="handler_error")).redriven == ()
    rest = await _redrive(settings, topic)
    assert [r.dlq_offset for r in rest.redriven] == [1]
    assert rest.skipped == {"already_redriven": 2}
    await run_live(settings, WorkspaceProjection())
    final = [
        r
        for batch in [b async for b in scan_dead_letters(settings, kafka_bootstrap, dlq)]
        for r in batch
    ]
    assert [r.reason for r in final] == ["handler_error", "not_json", "handler_error", "not_json"]
    assert [h["reason"] for h in final[3].history()] == ["not_json", "not_json"]

    # A redrive recorded as not done (a crash after the broker's acknowledgement, before the
    # commit) sends the record again: the same idempotency key, deduplicated.
    await execute(database_url, "DELETE FROM core.dlq_redrives WHERE dlq_offset = 2")
    assert [
        r.dlq_offset for r in (await _redrive(settings, topic, reason="handler_error")).redriven
    ] == [2]
    dup = await run_live(settings, WorkspaceProjection())
    assert dup.counts[Outcome.DEDUPLICATED] == 1
    assert await _applied(database_url, late.idempotency_key) == 1
    listed = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "list", "--topic", topic, "--json"
    )
    assert [r["redriven"] for r in listed] == [True, True, True, False]


async def test_listing_a_topic_that_does_not_exist_is_an_error_not_an_empty_table(
    settings: Settings, spectral_env: dict[str, str]
) -> None:
    """A misspelt name (or a forgotten topic prefix) must not read as "no dead letters"."""
    missing = f"{settings.topic_prefix}no.such.topic"
    result = await asyncio.to_thread(spectral_cli, spectral_env, "dlq", "list", "--topic", missing)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"no topic {missing}.dlq on the broker" in result.stderr
    assert result.stdout == ""
