"""aiokafka's connections read through spectral/kafka/aiokafka_frames.py's FrameReader: for any
frames and any way the socket splits them, it reads what asyncio's StreamReader reads (the
oracle), the same bytes, the same end-of-stream error with the same partial bytes and the same
errors, and leaves the same bytes unread."""

from __future__ import annotations

import asyncio
import struct

import aiokafka.conn
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectral.kafka.aiokafka_frames import LARGE_FRAME, FrameReader, install

_SIZES = st.one_of(
    st.integers(0, 300),
    st.integers(LARGE_FRAME - 2, LARGE_FRAME + 2),
    st.integers(LARGE_FRAME, 4 * LARGE_FRAME),
)


async def _read(reader: asyncio.StreamReader, feed: list[bytes], *, eof: bool) -> list[object]:
    """Frames read as aiokafka reads them (a 4-byte size, then the frame) while ``feed`` is
    given to the reader chunk by chunk, then the end of the stream when ``eof``; what was read,
    and how reading ended."""
    read: list[object] = []

    async def reading() -> None:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            read.append(await reader.readexactly(size))

    task = asyncio.create_task(reading())
    for chunk in feed:
        await asyncio.sleep(0)
        reader.feed_data(chunk)
    for _ in range(3):
        await asyncio.sleep(0)
    if eof:
        reader.feed_eof()
    await asyncio.wait([task], timeout=0.05)
    if task.done():
        exc = task.exception()
        if isinstance(exc, asyncio.IncompleteReadError):
            read.append(("incomplete", exc.partial, exc.expected))
        else:
            read.append(("raised", repr(exc)))
    else:
        task.cancel()
        await asyncio.wait([task])
        read.append(("waiting", bytes(reader._buffer)))  # type: ignore[attr-defined]
    return read


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(_SIZES, max_size=5),
    cuts=st.lists(st.integers(1, 3 * LARGE_FRAME), max_size=40),
    drop=st.integers(0, 70_000),
    eof=st.booleans(),
)
def test_frames_read_as_asyncio_reads_them_however_the_socket_splits_them(
    sizes: list[int], cuts: list[int], drop: int, eof: bool
) -> None:
    stream = b"".join(
        struct.pack(">i", size) + bytes((n + i) % 251 for i in range(size))
        for n, size in enumerate(sizes)
    )
    stream = stream[: max(0, len(stream) - drop)] if eof else stream
    feed, at = [], 0
    for cut in cuts:
        if at >= len(stream):
            break
        feed.append(stream[at : at + cut])
        at += cut
    if at < len(stream):
        feed.append(stream[at:])

    async def both() -> tuple[list[object], list[object]]:
        return (
            await _read(FrameReader(limit=2**16), feed, eof=eof),
            await _read(asyncio.StreamReader(limit=2**16), feed, eof=eof),
        )

    got, expected = asyncio.run(both())
    assert got == expected


async def test_an_error_while_a_large_frame_is_gathered_is_raised_its_bytes_left_unread() -> None:
    reader = FrameReader(limit=2**16)
    reading = asyncio.create_task(reader.readexactly(3 * LARGE_FRAME))
    await asyncio.sleep(0)
    reader.feed_data(b"a" * LARGE_FRAME)
    await asyncio.sleep(0)
    reader.set_exception(ConnectionResetError("gone"))
    with pytest.raises(ConnectionResetError):
        await reading
    assert bytes(reader._buffer) == b"a" * LARGE_FRAME  # type: ignore[attr-defined]


def test_aiokafka_connections_read_through_the_frame_reader_once_installed() -> None:
    assert install()
    assert install()  # once per process, idempotent
    assert aiokafka.conn.asyncio.StreamReader is FrameReader
    assert aiokafka.conn.asyncio.Future is asyncio.Future  # the rest is asyncio's own
