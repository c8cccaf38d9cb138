"""Claims against PostgreSQL: a small tenant is served at once next to a big one, a tenant cap
holds across claims, priorities order a tenant's items and a waiting item ages past newer ones
(real time, a short step), and every claim reserves its items' spend."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from uuid import UUID

import asyncpg
import pytest

from consumers.work_executor.claims import ClaimRepository
from producers.work.commands import GenerateAll, GenerateEpic, WorkCommands
from producers.work.domain.model import Priority
from spectral.db.connect import create_pool
from spectral.llm.limits import ProviderLimits
from spectral.settings import Settings
from tests.integration.work.support import PROJECT, backlog, harness

pytestmark = pytest.mark.integration


@asynccontextmanager
async def _claims(
    database_url: str, tenant_cap: int | None = None
) -> AsyncIterator[ClaimRepository]:
    pool = await create_pool(database_url, role="spectral_executor", max_size=2)
    try:
        yield ClaimRepository(
            pool, resolve=lambda _f, _o: None, limits=ProviderLimits(), tenant_cap=tenant_cap
        )
    finally:
        await pool.close()


async def _tenants(admin: asyncpg.Pool, jobs: list[tuple[UUID, UUID]]) -> list[str]:
    rows = await admin.fetch(
        "SELECT work_item_id, tenant FROM work.work_items WHERE work_item_id = ANY($1::uuid[])",
        [item for item, _ in jobs],
    )
    by_id = {r["work_item_id"]: r["tenant"] for r in rows}
    return [by_id[item] for item, _ in jobs]


async def test_a_small_tenant_is_claimed_at_once_next_to_a_big_one(
    database_url: str, settings: Settings
) -> None:
    async with harness(database_url) as h, _claims(database_url) as claims:
        await h.commands.put_document(PROJECT, "big", backlog(*(f"B{n}" for n in range(200))))
        await h.commands.generate_all(GenerateAll(PROJECT, "big", org_id="big"))
        await h.commands.put_document(PROJECT, "small", backlog("S1", "S2", "S3"))
        await h.commands.generate_all(GenerateAll(PROJECT, "small", org_id="small"))
        first = await claims.claim(4, UUID(int=1), "w")
        second = await claims.claim(4, UUID(int=2), "w")
        tenants = await _tenants(h.admin, [*first.jobs, *second.jobs])
        assert Counter(tenants) == {"org:big": 5, "org:small": 3}
        assert tenants[:4].count("org:small") == 2  # the first claim already shares
        reserved = await h.admin.fetchval(
            "SELECT count(*) FROM work.spend WHERE state = 'reserved'"
        )
        assert reserved == 8  # each lease holds the reservation of its next attempt


async def test_a_tenant_cap_holds_across_claims(database_url: str, settings: Settings) -> None:
    async with harness(database_url) as h, _claims(database_url, tenant_cap=2) as claims:
        await h.commands.put_document(PROJECT, "big", backlog(*(f"B{n}" for n in range(10))))
        await h.commands.generate_all(GenerateAll(PROJECT, "big", org_id="big"))
        await h.commands.put_document(PROJECT, "other", backlog("O1", "O2", "O3"))
        await h.commands.generate_all(GenerateAll(PROJECT, "other"))  # tenant project:p1
        got = [await claims.claim(5, UUID(int=n), "w") for n in range(1, 4)]
        tenants = Counter(await _tenants(h.admin, [j for c in got for j in c.jobs]))
        assert tenants == {"org:big": 2, f"project:{PROJECT}": 2}
        assert got[-1].jobs == []


async def test_priorities_order_a_tenant_s_items_and_a_waiting_item_ages_past_newer_ones(
    database_url: str, settings: Settings
) -> None:
    async with harness(database_url) as h, _claims(database_url) as claims:
        # Enqueue times are the commands' clock, set here: the order is decided by them alone,
        # however slowly a loaded machine runs the commands.
        at = [datetime.now(UTC) - timedelta(seconds=10)]
        commands = WorkCommands(h.producer, priority_step_seconds=0.2, clock=lambda: at[0])
        await commands.put_document(PROJECT, "doc", backlog("L", "N", "H", "Late high"))
        for epic, priority in (
            ("E1", Priority.LOW),
            ("E2", Priority.NORMAL),
            ("E3", Priority.HIGH),
        ):
            await commands.generate_epic(GenerateEpic(PROJECT, "doc", epic, priority=priority))
            at[0] += timedelta(milliseconds=10)
        at[0] += timedelta(seconds=0.8)  # E1 (low) ranks 0.6 s after it was enqueued: it has aged
        await commands.generate_epic(GenerateEpic(PROJECT, "doc", "E4", priority=Priority.HIGH))
        order = []
        for n in range(1, 5):
            (job,) = (await claims.claim(1, UUID(int=n), "w")).jobs
            order.append(
                await h.admin.fetchval(
                    "SELECT input->>'epic_id' FROM work.work_items WHERE work_item_id = $1", job[0]
                )
            )
        assert order == ["E3", "E2", "E1", "E4"]


async def test_among_idle_tenants_the_longest_waiting_go_first(
    database_url: str, settings: Settings
) -> None:
    async with harness(database_url) as h, _claims(database_url) as claims:
        epics = [f"E{n}" for n in range(1, 13)]
        await h.commands.put_document(PROJECT, "doc", backlog(*epics))
        for n, epic in enumerate(epics):  # org t11 first, t0 last: names sort the other way
            await h.commands.generate_epic(GenerateEpic(PROJECT, "doc", epic, org_id=f"t{11 - n}"))
        first = await claims.claim(2, UUID(int=1), "w")
        second = await claims.claim(2, UUID(int=2), "w")
        tenants = await _tenants(h.admin, [*first.jobs, *second.jobs])
        assert tenants == ["org:t11", "org:t10", "org:t9", "org:t8"]


async def test_under_a_sustained_flood_only_items_within_a_head_start_overtake(
    database_url: str, settings: Settings
) -> None:
    """The documented bound, under a flood the claims cannot keep up with: a ``low`` item is
    overtaken by exactly the ``high`` items enqueued within its head start (three steps) — by
    none enqueued later, however long the backlog grows. Its wait is bounded by what ranks
    ahead of it, not by a time."""
    step = 0.3
    async with harness(database_url) as h, _claims(database_url) as claims:
        commands = WorkCommands(h.producer, priority_step_seconds=step)
        epics = [f"epic {n}" for n in range(120)]
        await commands.put_document(PROJECT, "doc", backlog(*epics))
        low = await commands.generate_epic(
            GenerateEpic(PROJECT, "doc", "E1", priority=Priority.LOW)
        )
        flooding = True

        async def flood() -> None:
            for n in range(2, 121):
                if not flooding:
                    return
                await commands.generate_epic(
                    GenerateEpic(PROJECT, "doc", f"E{n}", priority=Priority.HIGH)
                )
                await asyncio.sleep(0.02)

        flooder = asyncio.create_task(flood())
        claimed: list[UUID] = []
        low_item: UUID = await h.admin.fetchval(
            "SELECT work_item_id FROM work.work_items WHERE thread_id = $1", low.thread_id
        )
        try:
            while await h.admin.fetchval("SELECT count(*) FROM work.work_items") < 4:
                await asyncio.sleep(0.01)  # the flood is under way before the first claim
            while low_item not in claimed:
                jobs = (await claims.claim(1, UUID(int=len(claimed) + 1), "w")).jobs
                claimed += [item for item, _ in jobs]
                await asyncio.sleep(0.15)  # slower than the flood: the backlog grows
            backlog_then = await h.admin.fetchval(
                "SELECT count(*) FROM work.work_items WHERE status = 'queued'"
            )
        finally:
            flooding = False
            await flooder
        rows = await h.admin.fetch(
            "SELECT work_item_id, rank_at, created_at, leased_at FROM work.work_items"
        )
        by_id = {r["work_item_id"]: r for r in rows}
        mine = by_id[low_item]
        head_start_end = mine["rank_at"]
        before = claimed[: claimed.index(low_item)]
        # Every item that went first was enqueued within the low item's head start ...
        assert before
        assert all(by_id[item]["rank_at"] <= head_start_end for item in before)
        # ... and every one of those waiting when the low item was claimed went first (an
        # item committed while that claim ran may not have been visible to it).
        visible = mine["leased_at"] - timedelta(seconds=0.1)
        within = {
            item
            for item, r in by_id.items()
            if item != low_item and r["rank_at"] <= head_start_end and r["created_at"] < visible
        }
        assert within <= set(before)
        # The flood kept coming after the head start, and outran the claims.
        assert any(r["created_at"] > head_start_end for r in rows)
        assert backlog_then > 0
