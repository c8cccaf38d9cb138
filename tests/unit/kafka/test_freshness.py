"""The outbox.ready_at header and the batch-observed freshness histogram."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from contracts import format_utc
from spectral.kafka.freshness import LATENCY_BUCKETS, READY_AT_HEADER, ready_at
from spectral.observability.metrics import BatchHistogram


def test_the_relays_stamp_reads_back_and_anything_else_is_not_measured() -> None:
    moment = datetime(2026, 11, 24, 8, 0, 0, 123456, tzinfo=UTC)
    stamp = format_utc(moment).encode()
    assert ready_at([("event_type", b"x"), (READY_AT_HEADER, stamp)]) == moment.timestamp()
    elsewhere = (moment + timedelta(hours=2)).replace(tzinfo=None).isoformat() + "+02:00"
    assert ready_at([(READY_AT_HEADER, elsewhere.encode())]) == moment.timestamp()  # same instant
    for value in (None, b"", b"2026-11-24T08:00:00", b"\xff", b"9" * 100, b"yesterday"):
        assert ready_at([(READY_AT_HEADER, value)]) is None, value
    assert ready_at([]) is None


def test_records_in_a_row_sharing_a_stamp_read_it_alike_and_another_stamp_reads_its_own() -> None:
    first = datetime(2026, 11, 24, 8, 0, 0, 123456, tzinfo=UTC)
    second = first + timedelta(milliseconds=3)
    stamps = {moment: format_utc(moment).encode() for moment in (first, second)}
    for moment in (first, first, second, second, first, second):
        # a fresh bytes object each time: the header of another record with the same value
        assert ready_at([(READY_AT_HEADER, bytes(stamps[moment]))]) == moment.timestamp()
    assert ready_at([(READY_AT_HEADER, b"yesterday")]) is None
    assert ready_at([(READY_AT_HEADER, bytes(stamps[first]))]) == first.timestamp()


@given(st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=80)))))
def test_no_header_content_raises(headers: list[tuple[str, bytes | None]]) -> None:
    ready_at([*headers, (READY_AT_HEADER, b"\x00")])


@given(st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), max_size=50))
def test_a_batch_histogram_counts_like_prometheus_own(values: list[float]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    BatchHistogram("h_seconds", "doc", {"consumer": "c"}, LATENCY_BUCKETS, ours).observe_many(
        values
    )
    reference = Histogram(
        "h_seconds", "doc", ["consumer"], buckets=LATENCY_BUCKETS, registry=theirs
    ).labels("c")
    for value in values:
        reference.observe(value)
    for bound in [*LATENCY_BUCKETS, float("inf")]:
        le = "+Inf" if bound == float("inf") else str(float(bound))
        labels = {"consumer": "c", "le": le}
        assert ours.get_sample_value("h_seconds_bucket", labels) == theirs.get_sample_value(
            "h_seconds_bucket", labels
        ), le
    assert ours.get_sample_value("h_seconds_count", {"consumer": "c"}) == len(values)
    expected = theirs.get_sample_value("h_seconds_sum", {"consumer": "c"})
    got = ours.get_sample_value("h_seconds_sum", {"consumer": "c"})
    assert got is not None
    assert expected is not None
    assert abs(got - expected) < 1e-6
