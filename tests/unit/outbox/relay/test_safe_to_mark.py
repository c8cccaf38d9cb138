"""Which rows of a batch the relay marks published after a partial failure."""

from __future__ import annotations

from spectral.outbox.relay.relay import safe_to_mark, unsettled
from spectral.outbox.relay.repository import OutboxRow

OK = object()  # stands for a RecordMetadata


def row(row_id: int, key: str) -> OutboxRow:
    return OutboxRow(row_id, "t", key, f"{key}:{row_id}", b"{}")


ROWS = [row(1, "a"), row(2, "b"), row(3, "a"), row(4, "b"), row(5, "c")]


def test_all_acknowledged_all_marked() -> None:
    assert safe_to_mark(ROWS, [OK] * 5) == ([1, 2, 3, 4, 5], None)


def test_a_failed_row_blocks_the_later_rows_of_its_key_only() -> None:
    boom = TimeoutError("no ack")
    ids, fault = safe_to_mark(ROWS, [OK, boom, OK, OK, OK])
    assert ids == [1, 3, 5]  # b's row 4 was acknowledged but comes after the failed row 2
    assert fault is boom


def test_rows_never_sent_are_not_marked() -> None:
    ids, fault = safe_to_mark(ROWS, [OK, OK, OK])
    assert ids == [1, 2, 3]
    assert fault is None  # the send error itself is reported by the caller


def test_the_first_fault_is_reported() -> None:
    first, second = TimeoutError("1"), TimeoutError("2")
    assert safe_to_mark(ROWS, [first, second, OK, OK, OK]) == ([5], first)


def test_unsettled_names_the_first_unmarked_row_of_each_key() -> None:
    # the batch read while this one was in flight holds back a key's rows behind these ids
    assert unsettled(ROWS, {1, 2, 3, 4, 5}) == {}
    assert unsettled(ROWS, {1, 3, 5}) == {"b": 2}
    assert unsettled(ROWS, {2, 5}) == {"a": 1, "b": 4}
    assert unsettled(ROWS, set()) == {"a": 1, "b": 2, "c": 5}
