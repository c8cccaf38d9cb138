"""Streamed answers are read up to their completion bound (spectral/llm/streams.py), pure and
against the fake gateway on loopback: a stream that never stops is cut at max_tokens, reports
no usage (the call is billed no more than its reservation) and says where it was stopped; an
honest stream is read whole, however its bytes are split."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spectral.llm.openai_compat import OpenAICompatSynthesizer
from spectral.llm.router import ModelRouter
from spectral.llm.seam import SynthesisRequest
from spectral.llm.streams import MAX_BYTES_PER_TOKEN, StreamError, StreamReader
from tests.fakes.openai_server import FakeModelServer


def _event(data: object) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _chunk(text: str) -> bytes:
    return _event({"model": "m-1", "choices": [{"index": 0, "delta": {"content": text}}]})


def _honest(words: list[str]) -> bytes:
    usage = {"prompt_tokens": 7, "completion_tokens": len(words)}
    return (
        b"".join(_chunk(w) for w in words)
        + _event({"choices": [], "usage": usage})
        + b"data: [DONE]\n\n"
    )


def _feed(reader: StreamReader, stream: bytes, cuts: list[int]) -> None:
    start = 0
    for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
        if cut <= start:
            continue
        if reader.feed(stream[start:cut]):
            return
        start = cut


@given(
    words=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=20),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
)
def test_an_honest_stream_within_its_bound_is_read_whole_however_it_is_split(
    words: list[str], cuts: list[int]
) -> None:
    reader = StreamReader(bound=20, model="asked")
    _feed(reader, _honest(words), cuts)
    answer = reader.response()
    assert reader.done
    assert answer.content == "".join(words)
    assert answer.model == "m-1"
    assert answer.usage == {"prompt_tokens": 7, "completion_tokens": len(words)}
    assert answer.stopped_at_bound is None


@given(bound=st.integers(1, 64), cuts=st.lists(st.integers(0, 100_000), max_size=8))
def test_a_stream_that_never_stops_is_cut_at_its_bound_and_reports_no_usage(
    bound: int, cuts: list[int]
) -> None:
    reader = StreamReader(bound=bound, model="m")
    endless = b": keep-alive\n" + _chunk("x") * (bound * 3 + 5)
    _feed(reader, endless, cuts)
    assert reader.stopped
    answer = reader.response()
    assert answer.stopped_at_bound == bound
    assert answer.usage == {}  # billed at the reservation, never past it
    assert reader.chunks == bound + 1  # it read one chunk past the bound, and no more
    assert answer.content == "x" * (bound + 1)


def test_a_gateway_packing_text_into_few_chunks_is_cut_by_its_bytes() -> None:
    reader = StreamReader(bound=10, model="m")
    big = "y" * (10 * MAX_BYTES_PER_TOKEN + 1)
    assert reader.feed(_chunk(big))
    assert reader.response().stopped_at_bound == 10


def test_a_reported_usage_past_the_bound_stops_the_reading() -> None:
    reader = StreamReader(bound=5, model="m")
    assert reader.feed(_event({"choices": [], "usage": {"completion_tokens": 6}}))
    assert reader.response().stopped_at_bound == 5


def test_a_line_without_end_is_cut() -> None:
    reader = StreamReader(bound=5, model="m")
    assert reader.feed(b"data: " + b"z" * (2 << 20))


def _client(url: str) -> OpenAICompatSynthesizer:
    return OpenAICompatSynthesizer(
        url, ModelRouter({"*": "route-model"}), timeout_seconds=10.0, stream=True
    )


def _request(prompt: str, max_tokens: int | None) -> SynthesisRequest:
    return SynthesisRequest(
        function_key="story_generate",
        prompt=prompt,
        input={},
        idempotency_key="item:1",
        max_tokens=max_tokens,
    )


async def test_the_synthesizer_reads_an_honest_stream_whole() -> None:
    with FakeModelServer() as server:
        client = _client(server.url)
        try:
            answer = await client.synthesize(_request("Write stories for epic E-1: x", 200))
        finally:
            await client.aclose()
        assert json.loads(answer.content)["stories"][0]["story_key"] == "E-1-1"
        assert answer.stopped_at_bound is None
        assert answer.usage["prompt_tokens"] == 11
        (call,) = server.snapshot()
        assert call.body["stream"] is True
        assert call.body["max_tokens"] == 200


async def test_the_synthesizer_stops_reading_a_gateway_that_never_stops_at_max_tokens() -> None:
    with FakeModelServer() as server:
        client = _client(server.url)
        started = time.monotonic()
        try:
            answer = await client.synthesize(_request("epic E-2: [endless]", 50))
        finally:
            await client.aclose()
        assert time.monotonic() - started < 10  # it did not wait for the timeout
        assert answer.stopped_at_bound == 50
        assert answer.usage == {}
        assert answer.content.count(" more") <= 50  # 51 chunks read, the story's first
        deadline = time.monotonic() + 5
        while not server.stream_closed and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert server.stream_closed  # the connection was closed: the gateway stopped sending
        sent = server.streamed
        await asyncio.sleep(0.2)
        assert server.streamed == sent


def test_a_stream_event_that_is_not_json_is_refused() -> None:
    reader = StreamReader(bound=5, model="m")
    with pytest.raises(StreamError, match="not JSON"):
        reader.feed(b"data: {not json\n")
    assert bytes(reader.raw) == b"data: {not json\n"  # the bytes paid for are kept
