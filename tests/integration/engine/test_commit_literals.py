"""The literals the engine writes into a batch's COMMIT message (stale marks, rejected keys) are
read back by PostgreSQL exactly as the values they stand for: any handler name (quotes,
backslashes, any character a name may hold) and any keys, whatever the session's
``standard_conforming_strings`` says."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spectral.engine.transaction import _bytea, _literal

pytestmark = pytest.mark.integration

_NAMES = st.text(
    alphabet=st.one_of(
        st.sampled_from("'\\\"{},E"), st.characters(codec="utf-8", exclude_characters="\x00")
    )
)
"""Text PostgreSQL can hold (no NUL, no lone surrogate), rich in what quoting must get right."""


def test_literals_read_back_as_their_values(database_url: str) -> None:
    loop = asyncio.new_event_loop()
    conn: asyncpg.Connection = loop.run_until_complete(asyncpg.connect(database_url))

    @settings(max_examples=200, deadline=None, database=None)
    @given(_NAMES, st.lists(st.binary(max_size=40), max_size=70), st.booleans())
    @example(name="a\\b", keys=[b"\\"], conforming=True)
    @example(name="it's \\'", keys=[b"'"], conforming=False)
    def round_trip(name: str, keys: list[bytes], conforming: bool) -> None:
        setting = "on" if conforming else "off"
        loop.run_until_complete(conn.execute(f"SET standard_conforming_strings = {setting}"))
        assert loop.run_until_complete(conn.fetchval(f"SELECT {_literal(name)}")) == name
        read = loop.run_until_complete(conn.fetchval(f"SELECT {_bytea(keys)}"))
        assert [bytes(key) for key in read] == keys

    try:
        round_trip()
    finally:
        loop.run_until_complete(conn.close())
        loop.close()
