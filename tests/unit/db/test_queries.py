from __future__ import annotations

import pytest

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
