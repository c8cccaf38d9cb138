from __future__ import annotations

import json

from spectral.dlq.policy import Skipped, select
from spectral.dlq.records import DeadLetterRecord, Topics
from spectral.kafka.dlq import DeadLetter, carried_history, history_of, redrive_headers


def _letter(offset: int, reason: str = "handler_error", **overrides: object) -> DeadLetter:
    values: dict[str, object] = {
        "reason": reason,
        "detail": "it failed",
        "source_topic": "t",
        "source_partition": 0,
        "source_offset": offset,
        "consumer": "c",
        "key": b"k",
        "value": b'{"x":1}',
        "original_headers": (("event_type", b"e"), ("idempotency_key", b"i")),
    }
    values.update(overrides)
    return DeadLetter(**values)  # type: ignore[arg-type]


def _record(offset: int, letter: DeadLetter) -> DeadLetterRecord:
    return DeadLetterRecord(
        "t.dlq", 0, offset, 0, letter.key, letter.value, tuple(letter.headers())
    )


def test_topics_from_either_name() -> None:
    assert Topics.of("a.b") == Topics("a.b", "a.b.dlq")
    assert Topics.of("a.b.dlq") == Topics("a.b", "a.b.dlq")


def test_selection_skips_and_says_why() -> None:
    records = [
        _record(0, _letter(10)),
        _record(1, _letter(11, reason="not_json")),
        _record(2, _letter(12)),
        _record(3, _letter(13, source_topic="other")),
        _record(4, _letter(14).as_reference("too big")),
        _record(5, _letter(15)),
    ]
    chosen = select(records, source_topic="t", reason="handler_error", redriven={(0, 2)})
    assert [r.offset for r in chosen.chosen] == [0, 5]
    assert chosen.skipped == {
        Skipped.OTHER_REASON: 1,
        Skipped.ALREADY_REDRIVEN: 1,
        Skipped.OTHER_SOURCE: 1,
        Skipped.VALUE_NOT_CARRIED: 1,
    }
    everything = select(records, source_topic="t", reason=None, redriven=set())
    assert [r.offset for r in everything.chosen] == [0, 1, 2, 5]


def test_redriven_headers_keep_the_originals_and_carry_the_history() -> None:
    first = _letter(10)
    headers = redrive_headers(first.headers(), "t.dlq", 0, 7)
    names = [k for k, _ in headers]
    assert names[:2] == ["event_type", "idempotency_key"]  # the originals, unchanged
    assert dict(headers)["dlq.redriven_from"] == b"t.dlq:0:7"
    carried = carried_history(headers)
    assert [h["source"] for h in carried] == ["t:0:10"]
    assert "dlq.reason" not in dict(headers)  # the redriven record is not itself a dead letter


def test_a_redriven_record_that_fails_again_continues_its_history() -> None:
    first = _letter(10)
    redriven = tuple(redrive_headers(first.headers(), "t.dlq", 0, 0))
    second = _letter(20, reason="handler_rejected", original_headers=redriven)
    assert [h["source"] for h in second.history] == ["t:0:10"]
    out = dict(second.headers())
    assert json.loads(out["dlq.history"] or b"")[0]["reason"] == "handler_error"
    assert out["dlq.reason"] == b"handler_rejected"
    assert "dlq.redriven_from" not in out  # dlq.* of the redriven record are not carried over
    full = history_of(second.headers())
    assert [(h["reason"], h["source"]) for h in full] == [
        ("handler_error", "t:0:10"),
        ("handler_rejected", "t:0:20"),
    ]
    # A third round grows it again.
    third = _letter(30, original_headers=tuple(redrive_headers(second.headers(), "t.dlq", 0, 1)))
    assert len(history_of(third.headers())) == 3


def test_an_ordinary_record_has_no_history_and_bad_history_is_ignored() -> None:
    assert _letter(1).history == ()
    assert carried_history([("dlq.history", b"not json")]) == ()
    assert carried_history([("dlq.history", b'{"a": 1}')]) == ()
    assert carried_history([("dlq.history", b'[{"reason": "x"}, 3]')]) == ({"reason": "x"},)
