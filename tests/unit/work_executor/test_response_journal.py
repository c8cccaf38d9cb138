"""The response journal on a real filesystem: appended answers are on disk before append returns,
settled files go, a live owner's files are left alone (flock), a dead owner's are adopted, a torn
or damaged line costs only itself, and any answer round-trips exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Sequence
from pathlib import Path

import asyncpg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from consumers.work_executor.journal import ResponseJournal, from_line, to_line
from consumers.work_executor.metrics import ExecutorMetrics
from consumers.work_executor.recorder import ResponseRecorder
from consumers.work_executor.transitions import ResponseRecord
from producers.work.domain.payloads import response_content, response_payload
from tests.hostile_answers import ANY_TEXT, hostile_text

ROOT = Path(__file__).resolve().parents[3]


def _record(content: str = "{}", attempt: int = 1) -> ResponseRecord:
    payload = response_payload(content=content, model="m", usage={}, duration_ms=1)
    return ResponseRecord(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), attempt, payload)


def _files(directory: Path, prefix: str = "responses-") -> list[Path]:
    return sorted(directory.glob(f"{prefix}*.jsonl"))


@settings(max_examples=100, deadline=None)
@given(ANY_TEXT | hostile_text(), st.integers(1, 10))
def test_any_answer_round_trips_through_a_journal_line(content: str, attempt: int) -> None:
    record = _record(content, attempt)
    line = to_line(record)
    assert line.isascii()
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    again = from_line(line)
    assert again == record
    assert response_content(again.payload) == content


async def test_appended_answers_are_on_disk_and_settled_files_go(tmp_path: Path) -> None:
    journal = ResponseJournal(tmp_path / "j", "worker:1", segment_bytes=2000)
    records = [_record(f'{{"n": {n}}}') for n in range(3)]
    ticket = await journal.append_async(records)
    (path,) = _files(tmp_path / "j")
    assert [from_line(line) for line in path.read_bytes().splitlines()] == records
    journal.settle(ticket)
    assert path.exists()  # the file in use takes the next answers (no file per answer)
    second = await journal.append_async([_record("x" * 2000)])  # fills it
    third = await journal.append_async([_record()])  # so this one starts another
    assert len(_files(tmp_path / "j")) == 2
    journal.settle(second)
    assert not path.exists()  # full and all settled: gone
    (current,) = _files(tmp_path / "j")
    journal.settle(third)
    journal.close()
    assert not current.exists()
    assert not (tmp_path / "j").exists()  # an empty directory is removed too


async def test_a_full_file_takes_no_more_appends_and_goes_once_settled(tmp_path: Path) -> None:
    journal = ResponseJournal(tmp_path, "w", segment_bytes=200)
    first = await journal.append_async([_record("x" * 300)])
    second = await journal.append_async([_record()])
    assert len(_files(tmp_path)) == 2
    journal.settle(second)
    assert len(_files(tmp_path)) == 2  # the second is the file in use
    journal.settle(first)
    assert len(_files(tmp_path)) == 1


async def test_closing_keeps_unsettled_answers_for_the_next_owner(tmp_path: Path) -> None:
    journal = ResponseJournal(tmp_path, "w")
    records = [_record()]
    await journal.append_async(records)
    journal.close()
    (orphan,) = ResponseJournal(tmp_path, "next").orphans()
    assert orphan.records == records
    ResponseJournal.discard(orphan)
    assert _files(tmp_path) == []


_OWNER = textwrap.dedent(
    """
    import asyncio, sys, uuid
    from pathlib import Path
    from consumers.work_executor.journal import ResponseJournal
    from consumers.work_executor.transitions import ResponseRecord
    from producers.work.domain.payloads import response_payload

    async def main() -> None:
        journal = ResponseJournal(Path(sys.argv[1]), "owner")
        payload = response_payload(content="paid\\x00\\ud800", model="m", usage={}, duration_ms=1)
        record = ResponseRecord(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), 1, payload)
        await journal.append_async([record])
        print("appended", flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


def test_a_live_owners_file_is_left_alone_and_a_dead_owners_is_adopted(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == b"appended"
        adopter = ResponseJournal(tmp_path, "adopter")
        assert adopter.orphans() == []  # alive: its flock holds
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        (orphan,) = adopter.orphans()
        assert [response_content(r.payload) for r in orphan.records] == ["paid\x00\ud800"]
        assert ResponseJournal(tmp_path, "third").orphans() == []  # the adopter holds it now
        ResponseJournal.release(orphan)  # not recorded yet: it stays
        (again,) = adopter.orphans()
        ResponseJournal.discard(again)
        assert _files(tmp_path) == []
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


@pytest.mark.parametrize("damage", ["torn", "hash", "garbage"])
async def test_a_torn_or_damaged_line_costs_only_itself(tmp_path: Path, damage: str) -> None:
    journal = ResponseJournal(tmp_path, "w")
    good = [_record("a"), _record("b")]
    await journal.append_async(good)
    (path,) = _files(tmp_path)
    bad = to_line(_record("c"))
    if damage == "torn":
        extra = bad[: len(bad) // 2]  # the process died mid-append
    elif damage == "hash":
        extra = bad.replace(b'"hash":"', b'"hash":"0')
    else:
        extra = b"\x00\xff{not json\n"
    with path.open("ab") as handle:
        handle.write(extra)
    journal.close()
    (orphan,) = ResponseJournal(tmp_path, "next").orphans()
    assert orphan.records == good
    assert orphan.skipped == 1


def test_refused_answers_are_kept_in_the_rejected_file(tmp_path: Path) -> None:
    journal = ResponseJournal(tmp_path, "w")
    record = _record("refused\x00")
    journal.reject([record], "DataError: no")
    (rejected,) = _files(tmp_path, "rejected-")
    assert [from_line(line) for line in rejected.read_bytes().splitlines()] == [record]
    assert journal.orphans() == []  # never replayed into a loop


@pytest.mark.parametrize(
    ("error", "kept", "rejected"),
    [
        (asyncpg.exceptions.ReadOnlySQLTransactionError("read-only"), True, False),  # dry run
        (asyncpg.exceptions.InsufficientPrivilegeError("denied"), True, False),
        (ConnectionRefusedError("down"), True, False),
        (asyncpg.exceptions.UntranslatableCharacterError("\\u0000"), False, True),
        (asyncpg.exceptions.ForeignKeyViolationError("no such item"), False, True),
    ],
    ids=["read-only", "privilege", "outage", "untranslatable", "foreign-key"],
)
async def test_a_replay_rejects_only_what_the_database_refuses_for_its_data(
    tmp_path: Path, error: Exception, kept: bool, rejected: bool
) -> None:
    dead = ResponseJournal(tmp_path, "dead")
    await dead.append_async([_record(), _record()])
    dead.close()

    async def write(records: Sequence[ResponseRecord]) -> None:
        raise error

    journal = ResponseJournal(tmp_path, "live")
    recorder = ResponseRecorder(journal, write, write, ExecutorMetrics(CollectorRegistry()))
    assert await recorder.adopt() is not kept
    assert bool(_files(tmp_path)) is kept
    assert bool(_files(tmp_path, "rejected-")) is rejected
    await recorder.aclose()
