"""Nested budgets against PostgreSQL: concurrent claims from several executors over an org, its
projects, their generate-all threads, child threads and a model route never let settled spend
plus reservations pass any scope's limit (hypothesis draws the limits and the interleaving);
nothing is refused while every scope still has room; work over a scope's budget is parked naming
that scope and resumes when that budget changes; an org budget set before nested budgets existed
still works unchanged, across the migration too."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from uuid import UUID, uuid4

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from consumers.work_executor.claims import ClaimRepository
from consumers.work_executor.metrics import ExecutorMetrics
from consumers.work_executor.schedule import Candidate, reservation
from consumers.work_executor.transitions import Transitions
from producers.work.budgets import BudgetCommands
from producers.work.commands import GenerateAll
from producers.work.domain.budgets import Period, Scope, ScopeKind, scope_budgets
from producers.work.domain.functions import installed_functions
from spectral.db.connect import create_pool
from spectral.db.migrate import MIGRATIONS_DIR, migrate
from spectral.devstack import Endpoints
from spectral.llm.limits import ProviderLimits, RouteLimits
from tests.integration.work.support import backlog, harness
from tests.support import unique_name, with_database

pytestmark = pytest.mark.integration

MODEL = "m-nested"
LIMITS = ProviderLimits({MODEL: RouteLimits(max_tokens=300, prompt_price=Decimal(1))})
EPICS = 5

# What every scope with a budget spent in its period, computed from the items and threads (not
# from the spend rows' own scope columns, which the claim writes): settled usage, else the
# reservation, nothing for a released one.
_SPENT = """
WITH s AS (
    SELECT x.state, x.tokens, x.reserved_tokens, x.cost, x.reserved_cost, x.model,
           w.org_id, w.project_id, w.thread_id, t.parent_thread_id
    FROM work.spend x
    JOIN work.work_items w USING (work_item_id)
    JOIN work.threads t ON t.thread_id = w.thread_id
)
SELECT b.scope_kind, b.scope_id, b.token_limit,
       coalesce(sum(CASE s.state WHEN 'settled' THEN s.tokens WHEN 'released' THEN 0
                                 ELSE s.reserved_tokens END), 0)::bigint AS spent
FROM work.budget_scopes b
LEFT JOIN s ON (b.scope_kind = 'org' AND s.org_id = b.scope_id)
            OR (b.scope_kind = 'project' AND s.project_id = b.scope_id)
            OR (b.scope_kind = 'thread'
                AND b.scope_id IN (s.thread_id::text, s.parent_thread_id::text))
            OR (b.scope_kind = 'route' AND s.model = b.scope_id)
GROUP BY 1, 2, 3
"""


async def _drift(admin: asyncpg.Pool) -> list[str]:
    """Every budget whose running totals (what claims read) differ from the sum over its spend
    rows, both read in one snapshot."""
    async with admin.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        totals = await scope_budgets(conn)
        ledger = await scope_budgets(conn, from_ledger=True)
    return [
        f"{scope}: running totals {totals.get(scope)} != ledger {view}"
        for scope, view in ledger.items()
        if totals.get(scope) != view
    ] + [f"{scope}: no budget in the ledger's view" for scope in totals.keys() - ledger.keys()]


async def _over(admin: asyncpg.Pool) -> list[str]:
    return [
        f"{r['scope_kind']} {r['scope_id']}: {r['spent']} > {r['token_limit']}"
        for r in await admin.fetch(_SPENT)
        if r["token_limit"] is not None and r["spent"] > r["token_limit"]
    ]


async def _seed(h: object, org: str) -> tuple[list[str], list[str], list[str]]:
    """Two projects of one org, each a generate-all (a parent thread) with EPICS children; the
    model route is proven (off probation: it takes more than one call at a time)."""
    commands = h.commands  # type: ignore[attr-defined]
    admin: asyncpg.Pool = h.admin  # type: ignore[attr-defined]
    await admin.execute(
        "INSERT INTO work.provider_routes (model, probation) VALUES ($1, false) "
        "ON CONFLICT (model) DO UPDATE SET probation = false",
        MODEL,
    )
    projects = [f"{org}-a", f"{org}-b"]
    for project in projects:
        await commands.put_document(
            project, f"{project}-doc", backlog(*(f"Epic {n} of {project}" for n in range(EPICS)))
        )
        await commands.generate_all(GenerateAll(project, f"{project}-doc", org_id=org))
    rows = await admin.fetch(
        "SELECT t.thread_id, t.parent_thread_id FROM work.threads t "
        "JOIN work.work_items w USING (thread_id) WHERE w.org_id = $1 ORDER BY w.created_at",
        org,
    )
    parents = sorted({str(r["parent_thread_id"]) for r in rows})
    children = [str(r["thread_id"]) for r in rows]
    return projects, parents, children


def _one_reservation() -> int:
    """About what one call of these backlogs reserves (the bound of a short prompt)."""
    probe = Candidate(uuid4(), "t", None, "story_generate", None, 0, 600)  # type: ignore[arg-type]
    tokens, _ = reservation(probe, LIMITS.for_model(MODEL))
    return tokens


async def _claimer(
    database_url: str,
    admin: asyncpg.Pool,
    rng: random.Random,
    worker: str,
    violations: list[str],
) -> None:
    """One executor's claims, each followed by settling or releasing some of its reservations
    (usage at most the reservation: an honest provider), until nothing more is claimable."""
    pool = await create_pool(database_url, role="spectral_executor", max_size=1)
    claims = ClaimRepository(pool, resolve=lambda _f, _o: MODEL, limits=LIMITS)
    held: list[tuple[object, int]] = []
    idle = 0
    try:
        while idle < 3:
            claimed = await claims.claim(rng.randint(1, 4), uuid4(), worker)
            violations.extend(await _over(admin))
            violations.extend(await _drift(admin))
            held += [(item, 1) for item, _ in claimed.jobs]
            rng.shuffle(held)
            cut = rng.randint(0, len(held))
            settle, held = held[:cut], held[cut:]
            for item, attempt in settle:
                fraction = Decimal(rng.choice([0, 25, 60, 100])) / 100
                state = "released" if fraction == 0 else "settled"
                if rng.random() < 0.1:  # its outcome is unknown, then released at the horizon
                    # Only while still reserved: another executor that ran out of work settled
                    # every reservation in full (_settle_in_full), and a settled call never
                    # becomes unknown.
                    await admin.execute(
                        "UPDATE work.spend SET state = 'unknown' "
                        "WHERE work_item_id = $1 AND attempt = $2 AND state = 'reserved'",
                        item,
                        attempt,
                    )
                    violations.extend(await _drift(admin))
                    state, fraction = "released", Decimal(0)
                await admin.execute(
                    "UPDATE work.spend SET state = $3, settled_at = CASE $3 WHEN 'settled' THEN "
                    "now() END, tokens = CASE $3 WHEN 'settled' THEN floor(reserved_tokens * $4) "
                    "END, cost = CASE $3 WHEN 'settled' THEN reserved_cost * $4 END, "
                    "released_unknown_at = CASE WHEN state = 'unknown' THEN now() END "
                    "WHERE work_item_id = $1 AND attempt = $2 AND state IN ('reserved', 'unknown')",
                    item,
                    attempt,
                    state,
                    fraction,
                )
            if not claimed.jobs and not settle:
                idle += 1
            await asyncio.sleep(0)
        await _settle_in_full(admin)
    finally:
        await pool.close()


async def _settle_in_full(admin: asyncpg.Pool) -> None:
    await admin.execute(
        "UPDATE work.spend SET state = 'settled', settled_at = now(), "
        "tokens = reserved_tokens, cost = reserved_cost WHERE state = 'reserved'"
    )


async def _drain(database_url: str, admin: asyncpg.Pool, violations: list[str]) -> None:
    """Claims until nothing more is admitted, every reservation settled in full at once: what
    is left waiting then has no room, or the claims refused it falsely."""
    pool = await create_pool(database_url, role="spectral_executor", max_size=1)
    claims = ClaimRepository(pool, resolve=lambda _f, _o: MODEL, limits=LIMITS)
    try:
        while (await claims.claim(10, uuid4(), "drain")).jobs:
            violations.extend(await _over(admin))
            violations.extend(await _drift(admin))
            await _settle_in_full(admin)
        await claims.claim(10, uuid4(), "drain")  # parks what nothing can free room for
    finally:
        await pool.close()


_limits = st.one_of(st.none(), st.integers(min_value=0, max_value=12))


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    org=_limits,
    projects=st.tuples(_limits, _limits),
    parent=_limits,
    children=st.lists(_limits, min_size=2, max_size=2),
    route=_limits,
    executors=st.integers(min_value=2, max_value=4),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_concurrent_claims_never_pass_any_enclosing_limit(  # noqa: PLR0917 - a limit per scope kind
    database_url: str,
    org: int | None,
    projects: tuple[int | None, int | None],
    parent: int | None,
    children: list[int | None],
    route: int | None,
    executors: int,
    seed: int,
) -> None:
    """Limits in units of about one call's reservation (0-12 calls, or none) for an org, its two
    projects, one generate-all thread, two child threads and the model route; 2-4 executors claim
    concurrently while reservations settle for less or are released. After every claim, no
    scope's settled spend plus reservations passes its limit; at the end, every item left
    unclaimed has a scope whose budget has no room for it (no false refusal), and the parked ones
    name such a scope. Throughout, every budget's running totals (what claims admit on) equal
    the sum over its spend rows, read in the same snapshot: admission decides on the same
    figures as if it summed the period's spend."""

    async def scenario() -> None:
        one = _one_reservation()
        org_id = f"o{uuid4().hex[:12]}"
        async with harness(database_url) as h:
            # Earlier examples' work ends; their spend goes (the route's budget counts every org).
            await h.admin.execute(
                "UPDATE work.work_items SET status = 'canceled', finished_at = now(), "
                "lease_token = NULL, leased_at = NULL, park_reason = NULL, parked_at = NULL, "
                "park_scope_kind = NULL, park_scope_id = NULL "
                "WHERE status IN ('queued', 'failed', 'parked', 'claimed', 'running')"
            )
            await h.admin.execute("DELETE FROM work.spend")
            await h.admin.execute("DELETE FROM work.budgets")
            await h.admin.execute("DELETE FROM work.scope_budgets")
            project_ids, parents, child_ids = await _seed(h, org_id)
            budgets = BudgetCommands(h.producer)
            wanted: list[tuple[Scope, int | None]] = [
                ((ScopeKind.ORG, org_id), org),
                ((ScopeKind.PROJECT, project_ids[0]), projects[0]),
                ((ScopeKind.PROJECT, project_ids[1]), projects[1]),
                ((ScopeKind.THREAD, parents[0]), parent),
                ((ScopeKind.THREAD, child_ids[0]), children[0]),
                ((ScopeKind.THREAD, child_ids[-1]), children[1]),
                ((ScopeKind.ROUTE, MODEL), route),
            ]
            for scope, calls in wanted:
                if calls is not None:
                    await budgets.set(scope, Period.DAY, token_limit=calls * one + one // 2)
            violations: list[str] = []
            rng = random.Random(seed)
            await asyncio.gather(
                *(
                    _claimer(
                        database_url, h.admin, random.Random(rng.random()), f"w{n}", violations
                    )
                    for n in range(executors)
                )
            )
            await _drain(database_url, h.admin, violations)
            assert violations == []
            assert await _over(h.admin) == []
            assert await _drift(h.admin) == []
            await _nothing_refused_with_room(h.admin, org_id)

    asyncio.run(scenario())


async def _nothing_refused_with_room(admin: asyncpg.Pool, org_id: str) -> None:
    """Every item of the org left waiting or parked has a scope without room for its call."""
    spent = {(r["scope_kind"], r["scope_id"]): r for r in await admin.fetch(_SPENT)}
    left = await admin.fetch(
        "SELECT w.work_item_id, w.status, w.org_id, w.project_id, w.thread_id, w.prompt_bytes, "
        "t.parent_thread_id, w.park_scope_kind, w.park_scope_id "
        "FROM work.work_items w JOIN work.threads t USING (thread_id) "
        "WHERE w.org_id = $1 AND w.status IN ('queued', 'failed', 'parked')",
        org_id,
    )
    for row in left:
        candidate = Candidate(
            row["work_item_id"],
            f"org:{org_id}",
            row["org_id"],
            "story_generate",
            None,  # type: ignore[arg-type]
            0,
            row["prompt_bytes"],
            project_id=row["project_id"],
            thread_id=row["thread_id"],
            parent_thread_id=row["parent_thread_id"],
        )
        tokens, _ = reservation(candidate, LIMITS.for_model(MODEL))
        refusing = [
            scope
            for scope in candidate.scopes(MODEL)
            if (found := spent.get((scope[0].value, scope[1]))) is not None
            and found["spent"] + tokens > found["token_limit"]
        ]
        assert refusing, f"{row['work_item_id']} was refused with room in every scope"
        if row["status"] == "parked":
            assert (ScopeKind(row["park_scope_kind"]), row["park_scope_id"]) in refusing


async def _scopes_parked(admin: asyncpg.Pool) -> Sequence[tuple[str, str]]:
    return [
        (r["park_scope_kind"], r["park_scope_id"])
        for r in await admin.fetch(
            "SELECT DISTINCT park_scope_kind, park_scope_id FROM work.work_items "
            "WHERE status = 'parked'"
        )
    ]


async def test_a_thread_budget_parks_only_its_items_names_itself_and_resumes_when_raised(
    database_url: str,
) -> None:
    async with harness(database_url) as h:
        project_ids, parents, child_ids = await _seed(h, "acme")
        budgets = BudgetCommands(h.producer)
        thread = (ScopeKind.THREAD, child_ids[0])
        await budgets.set(thread, Period.DAY, token_limit=0)
        pool = await create_pool(database_url, role="spectral_executor", max_size=1)
        registry = CollectorRegistry()
        metrics = ExecutorMetrics(registry)
        try:
            claims = ClaimRepository(pool, resolve=lambda _f, _o: MODEL, limits=LIMITS)
            claimed = await claims.claim(2 * EPICS, uuid4(), "w")
            metrics.parked(claimed.parked_by)
            assert len(claimed.jobs) == 2 * EPICS - 1
            assert claimed.parked_by == {ScopeKind.THREAD: 1}
            assert await _scopes_parked(h.admin) == [("thread", child_ids[0])]
            reason = await h.admin.fetchval(
                "SELECT park_reason FROM work.work_items WHERE status = 'parked'"
            )
            assert f"budget of thread {child_ids[0]} used up" in reason
            view = await budgets.get(thread)
            assert view is not None
            assert view.parked == 1
            assert (
                registry.get_sample_value("work_budget_parked_items_total", {"scope": "thread"})
                == 1
            )
            change = await budgets.set(thread, Period.DAY, token_limit=10**6)
            assert change.resumed == 1
            again = await claims.claim(1, uuid4(), "w")
            assert len(again.jobs) == 1
        finally:
            await pool.close()
        rows = await h.admin.fetch(
            "SELECT s.project_id, s.thread_id, s.parent_thread_id, w.project_id AS p, "
            "w.thread_id AS t FROM work.spend s JOIN work.work_items w USING (work_item_id)"
        )
        assert len(rows) == 2 * EPICS
        assert all((r["project_id"], r["thread_id"]) == (r["p"], r["t"]) for r in rows)
        assert {str(r["parent_thread_id"]) for r in rows} == set(parents)
        assert {r["project_id"] for r in rows} == set(project_ids)


async def test_an_org_budget_holds_over_nested_ones_and_its_view_is_unchanged(
    database_url: str,
) -> None:
    """The org budget (set as before nested budgets) still caps the org, parks naming the org,
    and its view lists it first among every scope's budget."""
    async with harness(database_url) as h:
        project_ids, _, _ = await _seed(h, "acme")
        one = _one_reservation()
        budgets = BudgetCommands(h.producer)
        await budgets.set("acme", Period.DAY, token_limit=3 * one)
        await budgets.set((ScopeKind.PROJECT, project_ids[0]), Period.DAY, token_limit=10 * one)
        await budgets.set((ScopeKind.ROUTE, MODEL), Period.TOTAL, token_limit=10**9)
        pool = await create_pool(database_url, role="spectral_executor", max_size=1)
        try:
            claims = ClaimRepository(pool, resolve=lambda _f, _o: MODEL, limits=LIMITS)
            claimed = await claims.claim(2 * EPICS, uuid4(), "w")
            assert 1 <= len(claimed.jobs) <= 3
            await h.admin.execute(
                "UPDATE work.spend SET state = 'settled', settled_at = now(), "
                "tokens = reserved_tokens, cost = reserved_cost"
            )
            parked = await claims.claim(2 * EPICS, uuid4(), "w")
            assert parked.jobs == []
            assert parked.parked_by == {ScopeKind.ORG: 2 * EPICS - len(claimed.jobs)}
        finally:
            await pool.close()
        views = await budgets.all()
        assert [(v.kind, v.scope_id) for v in views] == [
            (ScopeKind.ORG, "acme"),
            (ScopeKind.PROJECT, project_ids[0]),
            (ScopeKind.ROUTE, MODEL),
        ]
        org = views[0]
        assert org.org_id == "acme"
        assert org.parked == 2 * EPICS - len(claimed.jobs)
        assert org.tokens <= 3 * one
        assert views[1].parked == 0


async def test_the_migration_keeps_org_budgets_their_spend_and_parked_items(
    stack: Endpoints, tmp_path: Path
) -> None:
    """A database with an org budget, its settled spend and items it parked, migrated across
    0027 (and the migrations after it: the running totals of 0031 are filled from the spend
    rows already there): the budget reads the same, the parked items are parked by the org
    (and resume when its budget changes), and the spend rows name their project and threads."""
    name = unique_name("spectral_m_")
    admin_url = with_database(stack.database_url, "postgres")
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = with_database(stack.database_url, name)
    before = sorted(
        (p for p in MIGRATIONS_DIR.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name
    )
    nested = next(p for p in before if p.name.endswith("_nested_budgets.sql"))
    for path in before:
        if path.name < nested.name:
            (tmp_path / path.name).write_text(path.read_text())
    await migrate(url, tmp_path)
    async with harness(url) as h:
        await h.commands.put_document("p1", "d1", backlog("A", "B", "C"))
        await h.commands.generate_all(GenerateAll("p1", "d1", org_id="acme"))
        await h.admin.execute(
            "INSERT INTO work.budgets (org_id, period, token_limit) VALUES ('acme', 'day', 1000)"
        )
        items = [r["work_item_id"] for r in await h.items()]
        await h.admin.execute(
            "INSERT INTO work.spend (work_item_id, attempt, org_id, model, function_key, state, "
            "reserved_tokens, reserved_cost, tokens, cost, settled_at) "
            "VALUES ($1, 1, 'acme', 'm', 'story_generate', 'settled', 900, 0, 950, 0, now())",
            items[0],
        )
        await h.admin.execute(
            "UPDATE work.work_items SET status = 'parked', park_reason = 'budget of org acme', "
            "parked_at = now() WHERE work_item_id = ANY($1::uuid[])",
            items[1:],
        )
        old = await h.admin.fetchrow(
            "SELECT b.token_limit, sum(s.tokens) AS tokens FROM work.budgets b "
            "JOIN work.spend s ON s.org_id = b.org_id GROUP BY b.token_limit"
        )
        assert old is not None
    for path in before:  # 0027 and every later migration (the code reads what they add)
        if path.name >= nested.name:
            (tmp_path / path.name).write_text(path.read_text())
    await migrate(url, tmp_path)
    async with harness(url) as h:
        budgets = BudgetCommands(h.producer)
        view = await budgets.get("acme")
        assert view is not None
        assert (view.kind, view.token_limit, view.tokens) == (
            ScopeKind.ORG,
            old["token_limit"],
            old["tokens"],
        )
        assert view.parked == 2
        spend = await h.admin.fetchrow(
            "SELECT s.project_id, s.thread_id = w.thread_id AS own, s.parent_thread_id "
            "FROM work.spend s JOIN work.work_items w USING (work_item_id)"
        )
        assert spend is not None
        assert (spend["project_id"], spend["own"]) == ("p1", True)
        assert spend["parent_thread_id"] is not None
        change = await budgets.set("acme", Period.DAY, token_limit=10_000)
        assert change.resumed == 2
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def test_items_wait_for_a_reservation_of_unknown_outcome_instead_of_parking(
    database_url: str,
) -> None:
    """A scope full only because of a call of unknown outcome is not parked: that reservation
    is resolved by its policy (re-issued, or released at the horizon), and then the items go."""
    async with harness(database_url) as h:
        _, _, child_ids = await _seed(h, "acme")
        one = _one_reservation()
        thread = (ScopeKind.THREAD, child_ids[0])
        await BudgetCommands(h.producer).set(thread, Period.DAY, token_limit=one + one // 2)
        pool = await create_pool(database_url, role="spectral_executor", max_size=1)
        try:
            claims = ClaimRepository(pool, resolve=lambda _f, _o: MODEL, limits=LIMITS)
            only = await h.admin.fetch(
                "SELECT work_item_id FROM work.work_items WHERE thread_id = $1::uuid",
                child_ids[0],
            )
            first = await claims.claim(1, uuid4(), "w", only=[r["work_item_id"] for r in only])
            assert len(first.jobs) == 1
            item = first.jobs[0][0]
            # Its call's outcome is unknown; the item waits for a retry in the same thread.
            await h.admin.execute(
                "UPDATE work.spend SET state = 'unknown' WHERE work_item_id = $1", item
            )
            await h.admin.execute(
                "UPDATE work.work_items SET status = 'failed', attempt = 1, lease_token = NULL, "
                "leased_at = NULL, leased_by = NULL WHERE work_item_id = $1",
                item,
            )
            waiting = await claims.claim(1, uuid4(), "w", only=[item])
            assert waiting.jobs == []
            assert waiting.parked_by == {}  # waits: the unknown reservation may be released
            await h.admin.execute(
                "UPDATE work.spend SET state = 'released', released_unknown_at = now() "
                "WHERE work_item_id = $1",
                item,
            )
            again = await claims.claim(1, uuid4(), "w", only=[item])
            assert [job for job, _ in again.jobs] == [item]
        finally:
            await pool.close()


async def test_room_released_at_the_unknown_outcome_horizon_resumes_the_items_it_parked(
    database_url: str,
) -> None:
    """Items parked by a scope holding a reservation of unknown outcome (parked before such a
    reservation made its items wait, or by an executor that did not count it) resume when the
    horizon sweep releases that reservation: the room came back, and they are claimed. A
    release in another scope, or one before they were parked, resumes nothing."""
    async with harness(database_url) as h:
        _, parents, _ = await _seed(h, "acme")
        one = _one_reservation()
        budgets = BudgetCommands(h.producer)
        pool = await create_pool(database_url, role="spectral_executor", max_size=1)
        try:
            claims = ClaimRepository(pool, resolve=lambda _f, _o: MODEL, limits=LIMITS)
            transitions = Transitions(pool, installed_functions())
            lost: list[UUID] = []
            parked: list[UUID] = []
            for parent in parents:  # a generate-all each: one call's room in its budget
                await budgets.set((ScopeKind.THREAD, parent), Period.DAY, token_limit=one * 3 // 2)
                items = [
                    r["work_item_id"]
                    for r in await h.admin.fetch(
                        "SELECT w.work_item_id FROM work.work_items w JOIN work.threads t "
                        "USING (thread_id) WHERE t.parent_thread_id = $1::uuid "
                        "ORDER BY w.created_at, w.work_item_id",
                        parent,
                    )
                ]
                first = await claims.claim(1, uuid4(), "w", only=items[:1])
                assert [job for job, _ in first.jobs] == items[:1]
                # Its call's outcome is unknown (its worker died mid-call): counted in full.
                await h.admin.execute(
                    "UPDATE work.spend SET state = 'unknown', "
                    "reserved_at = now() - interval '2 s' WHERE work_item_id = $1",
                    items[0],
                )
                await h.admin.execute(
                    "UPDATE work.work_items SET status = 'failed', attempt = 1, "
                    "lease_token = NULL, leased_at = NULL, leased_by = NULL, "
                    "not_before = now() + interval '1 hour' WHERE work_item_id = $1",
                    items[0],
                )
                lost.append(items[0])
                parked.append(items[1])
            # The second generate-all's reservation is released before its item is parked.
            await h.admin.execute(
                "UPDATE work.spend SET state = 'released', released_unknown_at = now() "
                "WHERE work_item_id = $1",
                lost[1],
            )
            for parent, item in zip(parents, parked, strict=True):
                await h.admin.execute(
                    "UPDATE work.work_items SET status = 'parked', parked_at = now(), "
                    "park_reason = 'budget used up', park_scope_kind = 'thread', "
                    "park_scope_id = $2 WHERE work_item_id = $1",
                    item,
                    parent,
                )
            nothing = await claims.claim(2, uuid4(), "w", only=parked)
            assert nothing.jobs == []
            assert await _statuses(h.admin, parked) == ["parked", "parked"]
            released = await transitions.release_unknown(1.0, 100)
            swept = {(r.work_item_id, r.attempt) for r in released}
            assert (lost[0], 1) in swept
            assert (lost[1], 1) not in swept
            again = await claims.claim(2, uuid4(), "w", only=parked)
            assert [job for job, _ in again.jobs] == parked[:1]
            assert await _statuses(h.admin, parked) == ["claimed", "parked"]
        finally:
            await pool.close()


async def _statuses(admin: asyncpg.Pool, items: Sequence[UUID]) -> list[str]:
    rows = await admin.fetch(
        "SELECT work_item_id, status FROM work.work_items WHERE work_item_id = ANY($1::uuid[])",
        list(items),
    )
    found = {r["work_item_id"]: r["status"] for r in rows}
    return [found[item] for item in items]
