"""aiokafka's connections read a large response once, without growing a buffer chunk by chunk.

An aiokafka connection reads each response with asyncio's ``StreamReader.readexactly``: the
chunks the socket gives (up to 256 KiB each) are appended to one ``bytearray``, which is
reallocated — and copied whole — as it grows, then copied once more into the response. A
consumer's fetch response holds up to 1 MiB per partition (several MiB at once on a backlog), so
every fetched byte was copied about a dozen times (~0.44 us of CPU per 1 KB record measured
against one join of the chunks, 0.04). :class:`FrameReader` keeps the chunks of a response of
at least :data:`LARGE_FRAME` bytes as they arrive and joins them once, when the last one came;
its reader task wakes once per response instead of once per chunk. Everything else is
``StreamReader``'s own (smaller reads, end of stream, errors, flow control).

:func:`install` makes the connections aiokafka opens afterwards in this process use it, for the
aiokafka versions it was written against (0.14: ``aiokafka.conn`` builds its reader as
``asyncio.StreamReader(limit=..., loop=...)`` and reads only with ``readexactly``).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Iterable
from typing import Any, Final, SupportsIndex

import aiokafka.conn

from spectral.kafka.aiokafka_records import applies

LARGE_FRAME: Final = 64 * 1024
"""A ``readexactly`` of at least this many bytes not yet buffered gathers chunks (aiokafka's
reader limit: below it asyncio's buffer never pauses the socket either)."""


class FrameReader(asyncio.StreamReader):
    """asyncio's ``StreamReader`` whose ``readexactly(n)`` of a large ``n`` keeps the chunks
    fed meanwhile in a list and joins them once (see the module)."""

    _gathering: list[bytes] | None = None
    """The chunks of the response being read, while a large ``readexactly`` waits."""
    _gathered = 0
    _wanted = 0

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        parts = self._gathering
        if parts is None or not data:
            super().feed_data(data)
            return
        if self._eof:  # type: ignore[attr-defined]  # StreamReader's own state
            msg = "feed_data after feed_eof"
            raise AssertionError(msg)
        chunk = data if type(data) is bytes else bytes(data)
        parts.append(chunk)
        self._gathered += len(chunk)
        if self._gathered >= self._wanted:
            self._wakeup_waiter()  # type: ignore[attr-defined]

    async def readexactly(self, n: int) -> bytes:
        buffer: bytearray = self._buffer  # type: ignore[attr-defined]
        if n < LARGE_FRAME or len(buffer) >= n or self._exception is not None:  # type: ignore[attr-defined]
            return await super().readexactly(n)
        parts = [bytes(buffer)] if buffer else []
        buffer.clear()
        self._gathering, self._gathered, self._wanted = parts, len(parts[0]) if parts else 0, n
        try:
            while self._gathered < n and not self._eof:  # type: ignore[attr-defined]
                await self._wait_for_data("readexactly")  # type: ignore[attr-defined]
        except BaseException:
            buffer.extend(b"".join(parts))  # unread, as StreamReader leaves it
            raise
        finally:
            self._gathering = None
        if self._gathered < n:  # the stream ended first
            raise asyncio.IncompleteReadError(b"".join(parts), n)
        if excess := self._gathered - n:  # chunks fed after the last one it needed: kept
            rest: list[bytes] = []
            while excess >= len(parts[-1]):
                chunk = parts.pop()
                rest.append(chunk)
                excess -= len(chunk)
            if excess:
                last = parts[-1]
                parts[-1], tail = last[: len(last) - excess], last[len(last) - excess :]
                rest.append(tail)
            for chunk in reversed(rest):
                buffer.extend(chunk)
        data = b"".join(parts)  # a single chunk is returned as it is
        self._maybe_resume_transport()  # type: ignore[attr-defined]
        return data


class _Asyncio(types.ModuleType):
    """``aiokafka.conn``'s view of the asyncio module: asyncio's, with :class:`FrameReader` as
    its ``StreamReader``."""

    StreamReader = FrameReader

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)


def install() -> bool:
    """Make the aiokafka connections opened from now on in this process read with
    :class:`FrameReader` (once per process); False when the installed aiokafka is not a
    version this was written for."""
    if not applies():
        return False
    if not isinstance(aiokafka.conn.asyncio, _Asyncio):
        aiokafka.conn.asyncio = _Asyncio("asyncio")
    return True
