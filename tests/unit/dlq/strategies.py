"""Hypothesis strategies for what a hostile producer can put in a Kafka record: header names
and values (null, binary, not UTF-8, non-ASCII, NUL, JSON nested beyond any parser, huge), keys,
values and timestamps."""

from __future__ import annotations

import json

from hypothesis import strategies as st

HISTORY = "dlq.history"

deep_json = st.integers(min_value=1, max_value=60_000).map(lambda n: b"[" * n + b"]" * n)
huge_text = st.integers(min_value=10_000, max_value=400_000).map(lambda n: ("é" * n).encode())
history_like = st.lists(
    st.dictionaries(
        st.sampled_from(["reason", "detail", "consumer", "failed_at", "source", "x"]),
        st.one_of(st.text(max_size=50), st.integers(), st.none(), st.lists(st.integers())),
    ),
    max_size=40,
).map(lambda items: json.dumps(items, ensure_ascii=False).encode())

header_value = st.one_of(
    st.none(),
    st.binary(max_size=300),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"null", b"[]", b"{}", b"[null]", b"\x00", b"\xff\xfe", b"\xed\xa0\x80"]),
    deep_json,
    huge_text,
    history_like,
)
header_name = st.one_of(
    st.sampled_from(
        [
            HISTORY,
            "dlq.reason",
            "dlq.detail",
            "dlq.source.topic",
            "dlq.source.offset",
            "dlq.redriven_from",
            "event_type",
            "idempotency_key",
        ]
    ),
    st.text(min_size=0, max_size=30),
)
# Kafka header names are UTF-8 strings: what a client can send.
encodable_name = header_name.filter(lambda n: n.encode("utf-8", "surrogatepass") == n.encode())
headers = st.lists(st.tuples(encodable_name, header_value), max_size=8)
keys = st.one_of(st.none(), st.binary(max_size=64), st.binary(min_size=2000, max_size=5000))
values = st.one_of(st.binary(max_size=2000), st.just(b""), st.just(b"{not json"))
timestamps = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1), st.just(-1), st.just(0)
)
