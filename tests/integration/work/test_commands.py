"""Commands against PostgreSQL: semantic idempotency (ADR-035 §8), one transaction with the
outbox, generate-all orchestration, user-triggered retry."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from producers.work.commands import (
    DocumentConflictError,
    GenerateAll,
    GenerateEpic,
    UnknownTargetError,
)
from producers.work.domain.model import ThreadStatus
from producers.work.policy import ChildAction, Disposition
from tests.integration.work.support import DOCUMENT, PROJECT, backlog, harness

pytestmark = pytest.mark.integration


async def test_the_same_command_twice_gives_one_thread_and_one_item(database_url: str) -> None:
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        first = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        second = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        assert first.disposition is Disposition.CREATED
        assert second.disposition is Disposition.EXISTING
        assert second.thread_id == first.thread_id
        assert first.status is ThreadStatus.OPEN
        assert len(await h.items()) == 1
        assert await h.outbox_count("work.thread.opened") == 1
        assert await h.outbox_count("work.item.enqueued") == 1


async def test_concurrent_identical_commands_give_one_thread(database_url: str) -> None:
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        results = await asyncio.gather(
            *(h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1")) for _ in range(10))
        )
        assert len({r.thread_id for r in results}) == 1
        assert sum(r.disposition is Disposition.CREATED for r in results) == 1
        assert len(await h.items()) == 1
        assert await h.outbox_count("work.item.enqueued") == 1


async def test_the_outbox_row_carries_the_item_keyed_by_its_lock_scope(database_url: str) -> None:
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        result = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        row: Any = await h.admin.fetchrow(
            "SELECT record_key, idempotency_key, envelope FROM core.outbox "
            "WHERE event_type = 'work.item.enqueued'"
        )
        (item,) = await h.items()
        assert row["record_key"] == f"epic:{DOCUMENT}/E1"
        assert row["idempotency_key"] == f"{item['work_item_id']}:1"
        envelope = json.loads(row["envelope"])
        assert envelope["payload"]["thread_id"] == str(result.thread_id)
        assert envelope["payload"]["input"] == {"document_id": DOCUMENT, "epic_id": "E1"}


async def test_complete_is_a_noop_unless_forced_and_failed_retries_on_the_same_thread(
    database_url: str,
) -> None:
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        first = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        await h.admin.execute(
            "UPDATE work.work_items SET status = 'applied', finished_at = now();"
            "UPDATE work.threads SET status = 'complete', closed_at = now()"
        )
        noop = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        assert (noop.thread_id, noop.disposition) == (first.thread_id, Disposition.NOOP)
        assert noop.status is ThreadStatus.COMPLETE
        forced = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1", force=True))
        assert forced.disposition is Disposition.CREATED
        assert forced.thread_id != first.thread_id
        await h.admin.execute(
            "UPDATE work.work_items SET status = 'dead_letter', finished_at = now() "
            "WHERE thread_id = $1",
            forced.thread_id,
        )
        await h.admin.execute(
            "UPDATE work.threads SET status = 'failed', closed_at = now() WHERE thread_id = $1",
            forced.thread_id,
        )
        retried = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        assert (retried.thread_id, retried.disposition) == (forced.thread_id, Disposition.RETRIED)
        sequences = await h.admin.fetch(
            "SELECT sequence, status FROM work.work_items WHERE thread_id = $1 ORDER BY sequence",
            forced.thread_id,
        )
        assert [(r["sequence"], r["status"]) for r in sequences] == [
            (1, "dead_letter"),
            (2, "queued"),
        ]
        assert await h.thread_status(forced.thread_id) == "open"


async def test_generate_all_opens_a_parent_with_a_child_per_epic(database_url: str) -> None:
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("A", "B", "C"))
        single = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E2"))
        result = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        assert result.disposition is Disposition.CREATED
        assert result.status is ThreadStatus.RUNNING
        by_epic = {child.epic_id: child for child in result.children}
        assert set(by_epic) == {"E1", "E2", "E3"}
        # The running single-epic thread is adopted, not duplicated (§8: no duplicate items).
        assert by_epic["E2"].thread_id == single.thread_id
        assert by_epic["E2"].action is ChildAction.ADOPT
        assert len(await h.items()) == 3
        view = await h.reader.thread(result.thread_id)
        assert view is not None
        assert view.child_summary is not None
        assert view.child_summary["open"] == 3
        again = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        assert (again.thread_id, again.disposition) == (result.thread_id, Disposition.EXISTING)
        listed = await h.reader.project_threads(PROJECT, active=True)
        assert {t.thread_id for t in listed} == {result.thread_id} | {
            c.thread_id for c in result.children
        }


async def test_commands_refuse_unknown_targets_and_conflicting_documents(
    database_url: str,
) -> None:
    async with harness(database_url) as h:
        with pytest.raises(UnknownTargetError):
            await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("A"))
        again = await h.commands.put_document(PROJECT, DOCUMENT, backlog("A"))
        assert not again.created
        with pytest.raises(DocumentConflictError):
            await h.commands.put_document(PROJECT, DOCUMENT, backlog("B"))
        with pytest.raises(UnknownTargetError, match="E9"):
            await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E9"))
        with pytest.raises(UnknownTargetError):
            await h.commands.generate_all(GenerateAll("other-project", DOCUMENT))
        with pytest.raises(ValueError, match="must match"):
            GenerateEpic(PROJECT, DOCUMENT, "bad/epic")


async def test_generate_all_over_epics_already_done_closes_at_once(database_url: str) -> None:
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("A", "B"))
        for epic in ("E1", "E2"):
            await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, epic))
        await h.admin.execute(
            "UPDATE work.work_items SET status = 'applied', finished_at = now();"
            "UPDATE work.threads SET status = 'complete', closed_at = now()"
        )
        result = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        assert result.status is ThreadStatus.COMPLETE
        assert {c.action for c in result.children} == {ChildAction.ADOPT}
        assert len(await h.items()) == 2  # nothing new to pay for
        view = await h.reader.thread(result.thread_id)
        assert view is not None
        assert view.child_summary is not None
        assert view.child_summary["complete"] == 2
        forced = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT, force=True))
        assert forced.thread_id != result.thread_id
        assert {c.action for c in forced.children} == {ChildAction.CREATE}
        assert len(await h.items()) == 4
