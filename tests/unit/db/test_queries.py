from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spectral.db.queries import parse_queries


def test_named_blocks_are_split_by_name() -> None:
    text = "-- name: first\nSELECT 1;\n\n-- name: second\nSELECT\n  2;\n"
    assert parse_queries(text) == {"first": "SELECT 1;", "second": "SELECT\n  2;"}


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


def test_empty_block_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        parse_queries("-- name: a\n\n-- name: b\nSELECT 2;\n")


def test_a_braced_query_name_stands_for_that_querys_text() -> None:
    text = (
        "-- name: ids\nSELECT id FROM t\n\n"
        "-- name: count_ids\nSELECT count(*) FROM (\n{ids}\n) AS i, ({ids}) AS j\n"
    )
    assert parse_queries(text) == {
        "ids": "SELECT id FROM t",
        "count_ids": "SELECT count(*) FROM (\nSELECT id FROM t\n) AS i, (SELECT id FROM t) AS j",
    }


def test_an_included_query_may_itself_include_whatever_the_order_of_the_blocks() -> None:
    text = (
        "-- name: top\nSELECT * FROM ({middle}) AS m\n"
        "-- name: middle\nSELECT id FROM ({bottom}) AS b\n"
        "-- name: bottom\nSELECT 1 AS id\n"
    )
    queries = parse_queries(text)
    assert queries["middle"] == "SELECT id FROM (SELECT 1 AS id) AS b"
    assert queries["top"] == "SELECT * FROM (SELECT id FROM (SELECT 1 AS id) AS b) AS m"


def test_a_query_that_includes_itself_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("a -> a")):
        parse_queries("-- name: a\nSELECT * FROM ({a}) AS x\n")


def test_queries_that_include_each_other_are_refused() -> None:
    text = (
        "-- name: ok\nSELECT 1\n"
        "-- name: a\nSELECT * FROM ({b}) AS x\n"
        "-- name: b\nSELECT * FROM ({ok}) AS y, ({a}) AS z\n"
    )
    with pytest.raises(ValueError, match=re.escape("a -> b -> a")):
        parse_queries(text)


def test_format_placeholders_are_left_for_str_format() -> None:
    text = (
        "-- name: lock_partition\nLOCK TABLE core.{partition} IN ACCESS EXCLUSIVE MODE\n"
        "-- name: forget_literal\nDELETE FROM core.keys WHERE name = {} AND key = ANY({})\n"
        "-- name: mark_literal\nUPDATE core.keys SET stale = true WHERE name = {0} AND k = {1}\n"
    )
    queries = parse_queries(text)
    assert queries["lock_partition"] == "LOCK TABLE core.{partition} IN ACCESS EXCLUSIVE MODE"
    assert (
        queries["lock_partition"]
        .format(partition="outbox_p1")
        .endswith("core.outbox_p1 IN ACCESS EXCLUSIVE MODE")
    )
    assert queries["forget_literal"].format("'n'", "'{}'") == (
        "DELETE FROM core.keys WHERE name = 'n' AND key = ANY('{}')"
    )
    assert (
        queries["mark_literal"] == "UPDATE core.keys SET stale = true WHERE name = {0} AND k = {1}"
    )


def test_braces_that_name_no_query_of_the_file_are_left_as_they_are() -> None:
    text = (
        "-- name: known\nSELECT 1\n"
        "-- name: other\n"
        "SELECT '{}'::jsonb, '{1,2}'::int[], {unknown}, { known }, {known_not}\n"
    )
    assert parse_queries(text)["other"] == (
        "SELECT '{}'::jsonb, '{1,2}'::int[], {unknown}, { known }, {known_not}"
    )


_NAMES = st.from_regex(r"q_[a-z]{1,6}", fullmatch=True)
# no "q" (so a braced word is never a name) and no "-" (so no line is a "-- name:" line)
_BODIES = st.text(alphabet="abcxyz_ {}();,'\n0123", min_size=1).filter(lambda s: s.strip() != "")


@given(st.dictionaries(_NAMES, _BODIES, min_size=1, max_size=5))
def test_a_file_whose_braces_name_no_query_of_it_is_split_unchanged(
    blocks: dict[str, str],
) -> None:
    text = "".join(f"-- name: {name}\n{body}\n" for name, body in blocks.items())
    assert parse_queries(text) == {name: body.strip() for name, body in blocks.items()}
