"""Commands against PostgreSQL: semantic idempotency (ADR-035 §8), one transaction with the
outbox, generate-all orchestration, user-triggered retry."""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from producers.work.commands import (
    DocumentConflictError,
    GenerateAll,
    GenerateEpic,
    UnknownTargetError,
)
from producers.work.domain.model import ThreadStatus
from producers.work.policy import ChildAction, Disposition
from spectral.settings import Settings
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    Harness,
    ScriptedSynthesizer,
    backlog,
    executor,
    executor_settings,
    harness,
    run_until_settled,
)

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


_titles = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20
).filter(str.strip)


def test_a_document_changed_by_mutations_refuses_any_other_content(
    database_url: str, settings: Settings
) -> None:
    """At version >= 2 a PUT of other content — the first version's included — is refused
    with the current version; the current content again is a no-op (hypothesis draws the
    other contents). A loop of the test's own: hypothesis drives examples synchronously."""
    loop = asyncio.new_event_loop()
    stack = AsyncExitStack()
    try:
        h = loop.run_until_complete(stack.enter_async_context(harness(database_url)))
        current = loop.run_until_complete(_mutated_twice(h, settings, database_url))
        seen: list[int] = []

        @hypothesis_settings(max_examples=25, database=None)
        @given(titles=st.lists(_titles, min_size=1, max_size=3))
        def other(titles: list[str]) -> None:
            with pytest.raises(DocumentConflictError) as refused:
                loop.run_until_complete(
                    h.commands.put_document(PROJECT, DOCUMENT, backlog(*titles))
                )
            seen.append(refused.value.current_version)

        other()
        assert len(seen) >= 10
        assert set(seen) == {3}
        stored = loop.run_until_complete(h.reader.document(DOCUMENT))
        assert stored is not None
        assert (stored.version, stored.content) == (3, current)
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()


async def _mutated_twice(h: Harness, settings: Settings, database_url: str) -> dict[str, Any]:
    """A backlog at version 3 (two epics generated); the current content again is a no-op, the
    first version's content is refused."""
    first = backlog("Checkout", "Search")
    await h.commands.put_document(PROJECT, DOCUMENT, first)
    for epic in ("E1", "E2"):
        await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, epic))
    async with executor(executor_settings(settings), database_url, ScriptedSynthesizer()) as w:
        await run_until_settled(w, h.admin)
    current = await h.reader.document(DOCUMENT)
    assert current is not None
    assert current.version == 3
    again = await h.commands.put_document(PROJECT, DOCUMENT, current.content)
    assert (again.version, again.created) == (3, False)
    with pytest.raises(DocumentConflictError, match="version 3") as refused:
        await h.commands.put_document(PROJECT, DOCUMENT, first)
    assert refused.value.current_version == 3
    return dict(current.content)
