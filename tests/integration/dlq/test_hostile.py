"""`spectral dlq list | show | redrive` over hostile dead letters: whatever their headers hold,
the tools show them, and a dead letter the broker refuses cannot block the others' redrive."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.events import encode
from tests.integration.engine.hostile import MIB, Hostile, header_sets, publish_hostile
from tests.integration.replay.support import fetchval, rule_candidates, run_live, spectral_json
from tests.integration.replay.support import spectral_ok as ok
from tests.kafka_support import cluster_event, create_topics, read_all

pytestmark = pytest.mark.integration

SOURCE_LIMIT = 200_000


def _dead_letter(
    topic: str, offset: int, value: bytes, extra: tuple[tuple[str, bytes | None], ...]
) -> Hostile:
    own: tuple[tuple[str, bytes | None], ...] = (
        ("dlq.reason", b"handler_error"),
        ("dlq.detail", b"it failed"),
        ("dlq.source.topic", topic.encode()),
        ("dlq.source.partition", b"0"),
        ("dlq.source.offset", str(offset).encode()),
        ("dlq.consumer", b"rule-candidates"),
    )
    # The hostile headers come first: parse_headers keeps the first of each name.
    try:  # the snapshot's entity, as the contract asks of a record key
        key = str(json.loads(value)["payload"]["cluster_id"]).encode()
    except (ValueError, KeyError):
        key = b"k"
    return Hostile(key, value, (*extra, *own), valid=True, label=f"dl{offset}")


async def test_hostile_dead_letters_are_listed_shown_and_redriven_without_blocking_others(
    settings: Settings, kafka_bootstrap: str, database_url: str, spectral_env: dict[str, str]
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    dlq = dlq_topic(topic)
    await create_topics(kafka_bootstrap, [topic], configs={"max.message.bytes": str(SOURCE_LIMIT)})
    await create_topics(kafka_bootstrap, [dlq], configs={"max.message.bytes": str(10 * MIB)})
    rng = random.Random(3)
    letters = [
        _dead_letter(topic, n, encode(cluster_event()), hs) for n, hs in enumerate(header_sets(rng))
    ]
    history = json.dumps([{"reason": "handler_error", "detail": "é" * 900}] * 40).encode()
    near_limit = b'{"padding": "' + b"x" * (SOURCE_LIMIT - 3_000) + b'"}'
    letters.append(_dead_letter(topic, 100, near_limit, (("dlq.history", history),)))
    letters.append(_dead_letter(topic, 101, b"y" * (SOURCE_LIMIT + 10_000), ()))
    await publish_hostile(kafka_bootstrap, dlq, letters)

    listed = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "list", "--topic", topic, "--json"
    )
    assert len(listed) == len(letters)
    await asyncio.to_thread(ok, spectral_env, "dlq", "list", "--topic", topic)
    for entry in listed:  # the terminal view renders tables: markup in headers broke it
        offset = str(entry["offset"])
        await asyncio.to_thread(ok, spectral_env, "dlq", "show", "--topic", dlq, "--offset", offset)
    for offset in ("0", "2", "7"):  # null, deeply nested, NUL and markup
        await asyncio.to_thread(
            spectral_json, spectral_env, "dlq", "show", "--topic", dlq, "--offset", offset, "--json"
        )

    report = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "redrive", "--topic", topic, "--json"
    )
    too_large = len(letters) - 1
    assert report["skipped"] == {"refused": 1}, report["refused"]
    assert report["redriven"] == len(letters) - 1
    assert [r["dlq_offset"] for r in report["refused"]] == [too_large]
    assert report["skipped"] == {"refused": 1}
    landed = await read_all(kafka_bootstrap, topic)
    assert len(landed) == len(letters) - 1
    near = next(r for r in landed if r.value == near_limit)
    assert json.loads(near.header("dlq.history") or "null") == []  # sent without its history

    # The refused one is left for a later run; the others are never redriven twice.
    again = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "redrive", "--topic", topic, "--json"
    )
    assert again["redriven"] == 0
    assert again["skipped"] == {"already_redriven": len(letters) - 1, "refused": 1}

    # The live consumer applies every redriven snapshot (its hostile headers notwithstanding);
    # the padding record does not decode and returns to the dead-letter topic.
    summary = await run_live(settings, rule_candidates(settings)(database_url))
    assert summary.records == len(letters) - 1
    rows = await fetchval(database_url, "SELECT count(*) FROM platform.rule_candidates_pending")
    assert rows == len(letters) - 2
