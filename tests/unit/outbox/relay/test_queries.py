"""The relay's queries as loaded: the braced names of its file are put in by the loader, and the
statements are the ones the relay ran when its repository put them in itself."""

from __future__ import annotations

import re
from pathlib import Path

import spectral.outbox.relay.repository as relay_repository
from spectral.db.queries import load_queries

_FILE = Path(relay_repository.__file__).with_name("queries.sql")


def _raw_blocks(text: str) -> dict[str, str]:
    """The file's blocks as written, braced names and all."""
    parts = re.split(r"^--\s*name:\s*(\w+)\s*$", text, flags=re.MULTILINE)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def _as_the_repository_put_them_in(raw: dict[str, str]) -> dict[str, str]:
    """What repository.py ran before the loader put the texts in: ``{delayed_keys}`` in every
    query, then the condition ``{publishable_now}`` (so substituted) in ``fetch_batch`` and
    ``outbox_stats``, then ``{fetch_batch}`` (so substituted) in ``mark_and_fetch``."""
    sql = {name: text.replace("{delayed_keys}", raw["delayed_keys"]) for name, text in raw.items()}
    for name in ("fetch_batch", "outbox_stats"):
        sql[name] = sql[name].replace("{publishable_now}", sql["publishable_now"])
    sql["mark_and_fetch"] = sql["mark_and_fetch"].replace("{fetch_batch}", sql["fetch_batch"])
    return sql


def test_mark_and_fetch_is_loaded_whole() -> None:
    queries = load_queries(_FILE)
    mark_and_fetch = queries["mark_and_fetch"]
    assert "{fetch_batch}" not in mark_and_fetch
    assert "{delayed_keys}" not in mark_and_fetch
    assert "core.outbox_mark_published($6::bigint[], $7::smallint[])" in mark_and_fetch
    assert queries["fetch_batch"] in mark_and_fetch
    assert queries["delayed_keys"] in queries["fetch_batch"]


def test_the_loaded_queries_are_the_statements_the_repository_built() -> None:
    raw = _raw_blocks(_FILE.read_text(encoding="utf-8"))
    assert "{fetch_batch}" in raw["mark_and_fetch"]
    assert "{publishable_now}" in raw["fetch_batch"]
    assert "{publishable_now}" in raw["outbox_stats"]
    assert "{delayed_keys}" in raw["publishable_now"]
    loaded = load_queries(_FILE)
    assert dict(loaded) == _as_the_repository_put_them_in(raw)
    assert not any(re.search(r"\{\w+\}", text) for text in loaded.values())


def test_the_relay_and_its_backlog_gauge_share_one_condition() -> None:
    """fetch_batch takes its rows, and outbox_stats counts its oldest publishable row, by the
    same condition, written once."""
    queries = load_queries(_FILE)
    condition = queries["publishable_now"]
    assert "available_at" in condition
    assert "->> o.record_key" in condition
    assert condition in queries["fetch_batch"]
    assert condition in queries["outbox_stats"]
    assert condition in queries["mark_and_fetch"]
