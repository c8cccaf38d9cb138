"""The response journal: paid answers on local disk until the ledger has them (ADR-035 §1).

A paid answer is appended here — written and fsync'd — before the executor tries to record it
in PostgreSQL, so it survives a database outage of any length and a crash or restart of the
process: nothing that was paid for lives only in memory.

Files: ``<directory>/responses-<owner>-<n>.jsonl``, one JSON object per line (ASCII, so any
string — U+0000 and lone surrogates included — round-trips exactly), each with the sha256 of
its payload's canonical text (the ledger entry's hash). A process holds an exclusive ``flock``
on each of its own files for as long as it lives; that lock is how others tell a live owner
from a dead one. A record is settled once the ledger holds it (or it was refused, see below).
A process appends to one file until it reaches ``SEGMENT_BYTES``, then starts another; a full
file is deleted as soon as all its records are settled, the file in use when the process closes
the journal (so an append costs one write and one fdatasync, no file creation).

Replay (``adopt``): any process using the directory takes over the files of dead owners (it
wins their ``flock``), records their answers in the ledger — ``ON CONFLICT DO NOTHING`` makes
an answer recorded already a no-op (a dead owner's file may hold settled ones) — and deletes
each file once it is all in. A torn last line
(the process died mid-append, before the fsync returned) was never acknowledged: its call
counts as an unknown outcome, exactly as without a journal. A line that does not check out is
logged and skipped.

A record the database refuses for a reason other than an outage (it cannot happen for the
payloads the executor builds: they are made storable first) is moved to
``rejected-<owner>.jsonl`` in the same directory, fsync'd, for an operator; it is never
dropped and never replayed into a loop.

The directory must be on a local filesystem (``flock``) that outlives the process: a
persistent volume in a container deployment (``SPECTRAL_WORK_JOURNAL_DIR``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from uuid import UUID

from consumers.work_executor.transitions import ResponseRecord
from producers.work.domain.hashing import content_hash
from spectral.observability.logging import get_logger

log = get_logger(__name__)

SEGMENT_BYTES: Final = 1024 * 1024
"""A file stops taking appends at this size (it is deleted once settled)."""

_PREFIX: Final = "responses-"
_SAFE: Final = re.compile(r"[^A-Za-z0-9_.-]+")


def to_line(record: ResponseRecord) -> bytes:
    body = {
        "v": 1,
        "work_item_id": str(record.work_item_id),
        "thread_id": str(record.thread_id),
        "correlation_id": str(record.correlation_id),
        "attempt": record.attempt,
        "payload": record.payload,
        "hash": content_hash(record.payload),
    }
    return (json.dumps(body, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


def from_line(line: bytes) -> ResponseRecord:
    """The record of one line; ``ValueError`` (or ``KeyError``, ``TypeError``) if it does not
    check out."""
    data = json.loads(line)
    if not isinstance(data, dict) or data.get("v") != 1:
        raise ValueError("not a version 1 journal record")
    payload = data["payload"]
    if not isinstance(payload, dict) or content_hash(payload) != data["hash"]:
        raise ValueError("the payload does not match its hash")
    attempt = data["attempt"]
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise ValueError("bad attempt number")
    return ResponseRecord(
        UUID(data["work_item_id"]),
        UUID(data["thread_id"]),
        UUID(data["correlation_id"]),
        attempt,
        payload,
    )


@dataclass(eq=False)
class _Segment:
    path: Path
    fd: int
    size: int = 0
    unsettled: int = 0


@dataclass(frozen=True, eq=False)
class Ticket:
    """Where appended records wait to be settled."""

    segment: _Segment
    count: int


@dataclass(eq=False)
class Orphan:
    """A dead owner's file, locked by this process while its records are replayed."""

    path: Path
    fd: int
    records: list[ResponseRecord] = field(default_factory=list)
    skipped: int = 0


def _lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ResponseJournal:
    """One process's journal in ``directory`` (created if missing). ``owner`` names its files.

    ``append`` is blocking file I/O (a write and an fsync): callers run it off the event loop
    (``append_async``); bookkeeping (``settle``) stays on the loop's thread."""

    def __init__(self, directory: Path, owner: str, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self._owner = _SAFE.sub("_", owner)[:80] or "executor"
        self._segment_bytes = segment_bytes
        self._current: _Segment | None = None
        self._mine: dict[Path, _Segment] = {}
        self._sequence = 0
        self._closed = False

    # -- this process's answers -------------------------------------------------------------------

    def reserve(self, count: int) -> Ticket:
        """The segment the next ``count`` records go to, counted unsettled from now on (so it
        is not deleted while they are written)."""
        if self._closed:
            raise RuntimeError("the response journal is closed")
        segment = self._current
        if segment is None or segment.size >= self._segment_bytes:
            if segment is not None and segment.unsettled <= 0:
                self._remove(segment)  # full and all in the ledger
            segment = self._current = self._open_segment()
        segment.unsettled += count
        return Ticket(segment, count)

    @staticmethod
    def write(ticket: Ticket, records: Sequence[ResponseRecord]) -> None:
        """Append ``records`` to the ticket's segment and fsync them (blocking)."""
        data = b"".join(to_line(record) for record in records)
        segment = ticket.segment
        view = memoryview(data)
        while view:
            written = os.write(segment.fd, view)
            view = view[written:]
        os.fdatasync(segment.fd)
        segment.size += len(data)

    async def append_async(self, records: Sequence[ResponseRecord]) -> Ticket:
        """``records`` durably on disk; the returned ticket is settled once the ledger has them."""
        ticket = self.reserve(len(records))
        try:
            await asyncio.to_thread(self.write, ticket, records)
        except BaseException:
            self.settle(ticket)  # they were never acknowledged: nobody relies on them
            raise
        return ticket

    def settle(self, ticket: Ticket, count: int | None = None) -> None:
        """``count`` (default all) of the ticket's records are in the ledger (or rejected)."""
        segment = ticket.segment
        segment.unsettled -= ticket.count if count is None else count
        if segment.unsettled <= 0 and segment.path in self._mine and segment is not self._current:
            self._remove(segment)

    def reject(self, records: Sequence[ResponseRecord], reason: str) -> None:
        """Keep records the database refused in the rejected file (blocking, fsync'd)."""
        path = self.directory / f"rejected-{self._owner}.jsonl"
        with path.open("ab") as handle:
            for record in records:
                handle.write(to_line(record))
            handle.flush()
            os.fdatasync(handle.fileno())
        log.error(
            "paid responses refused by the database were kept in the rejected journal",
            path=str(path),
            work_item_ids=[str(r.work_item_id) for r in records],
            reason=reason[:500],
        )

    def close(self) -> None:
        """Release this process's files: the unsettled ones stay for the next owner to adopt."""
        self._closed = True
        for segment in list(self._mine.values()):
            if segment.unsettled <= 0:
                self._remove(segment)
            else:
                os.close(segment.fd)
        self._mine.clear()
        self._current = None
        with contextlib.suppress(OSError):  # gone when empty; kept while anything is left
            self.directory.rmdir()

    def _open_segment(self) -> _Segment:
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            self._sequence += 1
            path = self.directory / f"{_PREFIX}{self._owner}-{os.getpid()}-{self._sequence}.jsonl"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
            except FileExistsError:
                continue
            if not _lock(fd):  # pragma: no cover - a file this process has just created
                os.close(fd)
                continue
            _fsync_directory(self.directory)
            segment = _Segment(path, fd)
            self._mine[path] = segment
            return segment

    def _remove(self, segment: _Segment) -> None:
        self._mine.pop(segment.path, None)
        if self._current is segment:
            self._current = None
        with contextlib.suppress(FileNotFoundError):
            segment.path.unlink()  # while still locked: nobody adopts a file being removed
        os.close(segment.fd)

    # -- dead owners' answers ---------------------------------------------------------------------

    def orphans(self) -> list[Orphan]:
        """Files of dead owners, each locked by this process and read (blocking)."""
        if not self.directory.is_dir():
            return []
        found: list[Orphan] = []
        for path in sorted(self.directory.glob(f"{_PREFIX}*.jsonl")):
            if path in self._mine:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            if not _lock(fd):  # its owner lives
                os.close(fd)
                continue
            if not path.exists():  # removed by its owner between the listing and the lock
                os.close(fd)
                continue
            found.append(_read_orphan(path, fd))
        return found

    @staticmethod
    def discard(orphan: Orphan) -> None:
        """The orphan's records are all in the ledger: delete its file."""
        with contextlib.suppress(FileNotFoundError):
            orphan.path.unlink()
        os.close(orphan.fd)

    @staticmethod
    def release(orphan: Orphan) -> None:
        """Give the orphan up (its records could not be recorded now): it stays for later."""
        os.close(orphan.fd)


def _read_orphan(path: Path, fd: int) -> Orphan:
    orphan = Orphan(path, fd)
    with os.fdopen(os.dup(fd), "rb") as handle:
        lines = handle.read().split(b"\n")
    last = len(lines) - 1
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            orphan.records.append(from_line(line))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            orphan.skipped += 1
            # The last line may be torn (never acknowledged); any other is damage.
            (log.info if number == last else log.error)(
                "unreadable response journal line skipped",
                path=str(path),
                line=number + 1,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
    return orphan
