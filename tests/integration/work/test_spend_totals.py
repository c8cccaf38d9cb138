"""The running totals budgets are read from (migration 0031) against the spend rows themselves:
whatever writes spend — reserving, re-reserving a released attempt, settling within or beyond
the reservation, marking an outcome unknown, releasing, deleting — and whenever the changes
are folded, every budget of every period kind reads the same figures from the totals as from
a sum over its spend rows, rows of earlier hours, days, weeks and months included."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest

from consumers.work_executor.claims import ClaimRepository
from producers.work.budgets import BudgetCommands
from producers.work.commands import GenerateAll
from producers.work.domain import budgets as budget_reads
from producers.work.domain.budgets import Period, ScopeKind, scope_budgets
from spectral.db.connect import create_pool
from spectral.db.queries import load_queries
from spectral.llm.limits import ProviderLimits
from tests.integration.work.support import backlog, harness
from tests.support import unique_name

pytestmark = pytest.mark.integration

AGES = tuple(timedelta(hours=hours) for hours in (0, 50 / 60, 3, 26, 8 * 24, 40 * 24, 400 * 24))
"""How long before now each spend row was reserved: in this hour, the last hour or so, earlier
today or yesterday, earlier this week or month, last month and last year (which of them falls
into a budget's period depends on when the test runs: the totals must agree either way)."""
SPEND_ROWS = 20_000
"""A period's spend rows: enough that a plan reading them shows."""
_QUERIES = load_queries(Path(budget_reads.__file__).with_name("queries.sql"))


async def _drift(admin: asyncpg.Pool) -> list[str]:
    async with admin.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        totals = await scope_budgets(conn)
        ledger = await scope_budgets(conn, from_ledger=True)
    assert totals.keys() == ledger.keys()
    return [f"{s}: {totals[s]} != {ledger[s]}" for s in ledger if totals[s] != ledger[s]]


_LEDGER_CHART = """
WITH b AS (
    SELECT org_id, period,
           greatest(work.period_start(period, now()),
                    date_trunc('day', now(), 'UTC') - interval '31 days') AS since
    FROM work.budgets
    WHERE org_id = $1
)
SELECT CASE WHEN x.reserved_at < b.since THEN b.since
            ELSE date_trunc(CASE b.period WHEN 'hour' THEN 'minute' WHEN 'day' THEN 'hour'
                                          ELSE 'day' END, x.reserved_at, 'UTC') END AS at,
       sum(CASE x.state WHEN 'settled' THEN x.tokens WHEN 'released' THEN 0
                        ELSE x.reserved_tokens END) AS tokens,
       sum(CASE x.state WHEN 'settled' THEN x.cost WHEN 'released' THEN 0
                        ELSE x.reserved_cost END) AS cost
FROM b
JOIN work.spend x ON x.org_id = b.org_id AND (x.reserved_at >= b.since OR b.period = 'total')
GROUP BY 1
ORDER BY 1
"""
"""The console's chart of an org's spend, summed from its spend rows (every row since the
period start; a total budget's rows of before the 31 days shown at their start, where its
chart always has a point)."""


async def _chart_drift(admin: asyncpg.Pool, org: str) -> list[str]:
    """The chart read from the running totals against the same chart summed from the spend
    rows, for the org's budget set to each period kind in turn (rolled back)."""
    drift = []
    async with admin.acquire() as conn:
        tx = conn.transaction(isolation="repeatable_read")
        await tx.start()
        try:
            for period in Period:
                await conn.execute(
                    "UPDATE work.budgets SET period = $2 WHERE org_id = $1", org, period.value
                )
                rows = await conn.fetch(_QUERIES["spend_over_period"], [org])
                read = [(r["at"], r["tokens"], r["cost"]) for r in rows]
                expected, tokens, cost = [], 0, Decimal(0)
                with localcontext() as exact:
                    exact.prec = 100  # numeric sums are exact
                    for r in await conn.fetch(_LEDGER_CHART, org):
                        if r["tokens"] or r["cost"]:  # a bucket that counts nothing: no point
                            tokens, cost = tokens + r["tokens"], cost + r["cost"]
                            expected.append((r["at"], tokens, cost))
                start = await conn.fetchval(
                    "SELECT date_trunc('day', now(), 'UTC') - interval '31 days'"
                )
                if period is Period.TOTAL and start not in [at for at, *_ in expected]:
                    expected.insert(0, (start, 0, Decimal(0)))
                if read != expected:
                    drift.append(f"{period.value}: {read} != {expected}")
        finally:
            await tx.rollback()
    return drift


async def _fold(pool: asyncpg.Pool) -> int:
    folded: int = await pool.fetchval("SELECT work.fold_spend_changes()")
    return folded


async def test_totals_equal_the_spend_rows_for_every_period_and_every_change(
    database_url: str,
) -> None:
    async with harness(database_url) as h:
        org = unique_name("o")
        project, document = unique_name("p"), unique_name("d")
        await h.commands.put_document(project, document, backlog("A", "B"))
        await h.commands.generate_all(GenerateAll(project, document, org_id=org))
        rows = await h.admin.fetch(
            "SELECT w.work_item_id, w.thread_id, t.parent_thread_id FROM work.work_items w "
            "JOIN work.threads t USING (thread_id) WHERE w.org_id = $1 ORDER BY w.sequence",
            org,
        )
        item: UUID = rows[0]["work_item_id"]
        thread, parent = str(rows[0]["thread_id"]), str(rows[0]["parent_thread_id"])
        model = unique_name("m")
        budgets = BudgetCommands(h.producer)
        # One budget of each period kind, on each kind of scope the rows count in.
        await budgets.set(org, Period.MONTH, token_limit=10**9)
        await budgets.set((ScopeKind.PROJECT, project), Period.WEEK, token_limit=10**9)
        await budgets.set((ScopeKind.THREAD, thread), Period.DAY, token_limit=10**9)
        await budgets.set((ScopeKind.THREAD, parent), Period.TOTAL, cost_limit=Decimal(10**6))
        await budgets.set((ScopeKind.ROUTE, model), Period.HOUR, token_limit=10**9)
        executor = await create_pool(database_url, role="spectral_executor", max_size=1)
        try:
            for attempt, age in enumerate(AGES, start=1):
                await h.admin.execute(
                    "INSERT INTO work.spend (work_item_id, attempt, org_id, model, function_key, "
                    "state, reserved_tokens, reserved_cost, project_id, thread_id, "
                    "parent_thread_id, reserved_at) "
                    "VALUES ($1, $2, $3, $4, 'story_generate', 'reserved', $5, $6, $7, $8, $9, "
                    "now() - $10::interval)",
                    item,
                    attempt,
                    org,
                    model,
                    100 * attempt,
                    attempt / 10,
                    project,
                    rows[0]["thread_id"],
                    rows[0]["parent_thread_id"],
                    age,
                )
            assert await _drift(h.admin) == []  # nothing folded yet: read from the changes
            assert await _chart_drift(h.admin, org) == []
            assert await _fold(executor) > 0
            assert await _drift(h.admin) == []
            assert await _chart_drift(h.admin, org) == []
            await _fold(executor)  # buckets no period reads any more are dropped
            old = await h.admin.fetch(
                "SELECT bucket, bucket_start FROM work.spend_totals WHERE scope_id = $1 AND "
                "((bucket = 'hour' AND bucket_start < now() - interval '2 hours') OR "
                "(bucket = 'day' AND bucket_start < now() - interval '32 days'))",
                org,
            )
            assert old == []
            assert await _drift(h.admin) == []
            assert await _chart_drift(h.admin, org) == []
            changes = [
                # settled within its reservation, and beyond it (a provider overrun)
                (
                    "UPDATE work.spend SET state = 'settled', settled_at = now(), tokens = 60, "
                    "cost = 0.05 WHERE work_item_id = $1 AND attempt = 1"
                ),
                (
                    "UPDATE work.spend SET state = 'settled', settled_at = now(), tokens = 900, "
                    "cost = 1.5 WHERE work_item_id = $1 AND attempt = 2"
                ),
                # outcome unknown, then released at the horizon
                "UPDATE work.spend SET state = 'unknown' WHERE work_item_id = $1 AND attempt >= 3",
                (
                    "UPDATE work.spend SET state = 'released', released_unknown_at = now() "
                    "WHERE work_item_id = $1 AND attempt = 4"
                ),
                # a released attempt reserved again, now (the claim's re-reservation)
                (
                    "UPDATE work.spend SET state = 'reserved', reserved_tokens = 77, "
                    "released_unknown_at = NULL, reserved_at = now() "
                    "WHERE work_item_id = $1 AND attempt = 4"
                ),
                # a re-issue counted on its row changes nothing budgets count
                "UPDATE work.spend SET reissues = reissues + 1 WHERE work_item_id = $1",
                "DELETE FROM work.spend WHERE work_item_id = $1 AND attempt = 7",
            ]
            for n, statement in enumerate(changes):
                await h.admin.execute(statement, item)
                assert await _drift(h.admin) == [], statement
                assert await _chart_drift(h.admin, org) == [], statement
                if n % 2:
                    await _fold(executor)
                    assert await _drift(h.admin) == [], statement
                    assert await _chart_drift(h.admin, org) == [], statement
            count = "SELECT count(*) FROM work.spend_changes WHERE org_id = $1"
            async with h.admin.acquire() as conn, conn.transaction(isolation="repeatable_read"):
                before = await conn.fetchval(count, org)
                await conn.execute(
                    "UPDATE work.spend SET reissues = reissues + 1 WHERE work_item_id = $1", item
                )
                assert await conn.fetchval(count, org) == before  # nothing counted changed
        finally:
            await executor.close()


async def test_a_claim_folds_the_changes_and_admits_on_the_same_figures(
    database_url: str,
) -> None:
    """The claim folds what changed into the totals; a scope's view (what admission decides
    on) is the same before and after the fold, and the same as summed from the spend rows."""
    async with harness(database_url) as h:
        org, project, document = unique_name("o"), unique_name("p"), unique_name("d")
        await h.commands.put_document(project, document, backlog("A", "B", "C"))
        await h.commands.generate_all(GenerateAll(project, document, org_id=org))
        budgets = BudgetCommands(h.producer)
        await budgets.set(org, Period.DAY, token_limit=10**9)
        executor = await create_pool(database_url, role="spectral_executor", max_size=1)
        try:
            claims = ClaimRepository(executor, resolve=lambda _f, _o: None, limits=ProviderLimits())
            claimed = await claims.claim(2, uuid4(), "w")
            assert claimed.jobs
            assert await _drift(h.admin) == []
            # A lease handed back before its attempt started: its reservation released, the
            # item waiting again; the next claim reserves the same attempt again (the claim's
            # insert meets the released row and updates it).
            item = claimed.jobs[0][0]
            await h.admin.execute(
                "UPDATE work.spend SET state = 'released' WHERE work_item_id = $1", item
            )
            await h.admin.execute(
                "UPDATE work.work_items SET status = 'queued', lease_token = NULL, "
                "leased_at = NULL, leased_by = NULL WHERE work_item_id = $1",
                item,
            )
            assert await _drift(h.admin) == []
            view = await budgets.get(org)
            again = await claims.claim(1, uuid4(), "w", only=[item])
            assert [job for job, _ in again.jobs] == [item]
            state = await h.admin.fetchval(
                "SELECT state FROM work.spend WHERE work_item_id = $1 AND attempt = 1", item
            )
            assert state == "reserved"
            assert await _drift(h.admin) == []
            after = await budgets.get(org)
            assert view is not None
            assert after is not None
            assert after.outstanding == view.outstanding + 1
            assert after.tokens > view.tokens
        finally:
            await executor.close()


def _relations(plan: dict[str, Any]) -> list[tuple[str, int]]:
    """Each relation the executed plan reads, with the rows its node produced or threw away."""
    own = []
    if "Relation Name" in plan:
        rows = int(plan.get("Actual Rows", 0)) * int(plan.get("Actual Loops", 0))
        own.append((plan["Relation Name"], rows + int(plan.get("Rows Removed by Filter", 0))))
    return own + [r for child in plan.get("Plans", []) for r in _relations(child)]


async def test_the_running_totals_read_never_reads_the_spend_rows(database_url: str) -> None:
    """The two reads share one function (migration 0036) and each plan holds only its own
    branches, custom and generic plans alike: the budgets read from the totals cost the same
    whatever the period's volume; the audit sums the period's spend rows."""
    async with harness(database_url) as h:
        org, project, document = unique_name("o"), unique_name("p"), unique_name("d")
        await h.commands.put_document(project, document, backlog("A"))
        await h.commands.generate_all(GenerateAll(project, document, org_id=org))
        item = await h.admin.fetchval(
            "SELECT work_item_id FROM work.work_items WHERE org_id = $1", org
        )
        await BudgetCommands(h.producer).set(org, Period.DAY, token_limit=10**9)
        await h.admin.execute(
            "INSERT INTO work.spend (work_item_id, attempt, org_id, model, function_key, state, "
            "reserved_tokens, reserved_cost) "
            "SELECT $1, g, $2, 'm', 'story_generate', 'reserved', 10, 0.01 "
            "FROM generate_series(1, $3::int) AS g",
            item,
            org,
            SPEND_ROWS,
        )
        await _fold(h.admin)
        await h.admin.execute("ANALYZE work.spend, work.spend_totals")
        async with h.admin.acquire() as conn:
            for name, reads_the_ledger in (
                ("budgets_with_spend", False),
                ("budgets_from_ledger", True),
            ):
                query = _QUERIES[name]
                custom = await conn.fetch(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", ["org"], [org])
                await conn.execute(f"PREPARE budgets (text[], text[]) AS {query}")
                await conn.execute("SET plan_cache_mode = force_generic_plan")
                generic = await conn.fetch(
                    f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE budgets(ARRAY['org'], ARRAY['{org}'])"
                )
                await conn.execute("DEALLOCATE budgets; RESET plan_cache_mode")
                for [row] in (custom, generic):
                    relations = _relations(json.loads(row[0])[0]["Plan"])
                    spend = sum(rows for relation, rows in relations if relation == "spend")
                    if reads_the_ledger:
                        assert spend >= SPEND_ROWS, relations
                    else:
                        assert "spend" not in {relation for relation, _ in relations}, relations
                        assert sum(rows for _, rows in relations) < 100, relations
            # The console's chart of a monthly budget reads the day totals, never the rows.
            await BudgetCommands(h.producer).set(org, Period.MONTH, token_limit=10**9)
            [row] = await conn.fetch(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {_QUERIES['spend_over_period']}", [org]
            )
            relations = _relations(json.loads(row[0])[0]["Plan"])
            assert sum(rows for relation, rows in relations if relation == "spend") == 0
            assert sum(rows for _, rows in relations) < 100, relations
            [point] = await conn.fetch(_QUERIES["spend_over_period"], [org])
            assert point["tokens"] == 10 * SPEND_ROWS
            scope = (ScopeKind.ORG, org)
            totals = await scope_budgets(conn, [scope])
            assert totals == await scope_budgets(conn, [scope], from_ledger=True)
            assert totals[scope].tokens == 10 * SPEND_ROWS
