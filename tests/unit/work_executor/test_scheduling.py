"""The pure parts of scheduling durable work: fair claims across tenants, priorities and their
ageing, provider limits (concurrency, GCRA rates, pauses), budgets and parking, the bound of a
prompt's size, Retry-After, and the attempts a 429 does not count."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.work_executor.plan import Exhausted, Start, next_step
from consumers.work_executor.retry import FailureKind, RetryDecision, RetryStrategy
from consumers.work_executor.schedule import (
    Blocked,
    BudgetState,
    Candidate,
    RouteState,
    Situation,
    plan_claim,
    reservation,
)
from producers.work.domain.budgets import Scope, ScopeKind
from producers.work.domain.documents import Epic
from producers.work.domain.hashing import content_hash
from producers.work.domain.history import ItemOutcome, reconstruct
from producers.work.domain.model import EntryType, LedgerEntry, Priority
from producers.work.domain.priority import rank_at
from producers.work.domain.story.prompts import prompt_bytes_bound, render_story_prompt
from spectral.errors import ConfigurationError
from spectral.llm.limits import ProviderLimits, RouteLimits, load_llm_file
from spectral.llm.openai_compat import retry_after

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
MODEL = "m-1"
ORG_O = (ScopeKind.ORG, "o")


def _candidates(
    tenant: str, count: int, *, org: str | None = None, start: int = 0
) -> list[Candidate]:
    return [
        Candidate(
            work_item_id=UUID(int=hash((tenant, n)) % 2**64),
            tenant=tenant,
            org_id=org,
            function_key="story_generate",
            rank_at=NOW - timedelta(seconds=1000 - start - n),
            attempt=0,
            prompt_bytes=800,
        )
        for n in range(count)
    ]


def _situation(candidates: list[Candidate], want: int, **extra: object) -> Situation:
    values: dict[str, object] = {
        "now": NOW,
        "want": want,
        "candidates": candidates,
        "tenant_in_flight": {},
        "resolve": lambda _f, _o: MODEL,
        "limits": ProviderLimits(),
    }
    values.update(extra)
    return Situation(**values)  # type: ignore[arg-type]


# -- fairness -----------------------------------------------------------------------------------


def test_a_small_tenant_is_served_at_once_however_long_the_big_one_queue_is() -> None:
    big = _candidates("org:big", 64)  # ranks earlier than every small item
    small = _candidates("org:small", 3, start=900)
    plan = plan_claim(_situation([*big, *small], want=6, tenant_in_flight={"org:big": 32}))
    picked = [p.candidate.tenant for p in plan.picks]
    assert picked.count("org:small") == 3  # the tenant with nothing in flight goes first
    assert picked[:3] == ["org:small"] * 3


def test_claims_go_round_robin_by_least_in_flight() -> None:
    a, b, c = _candidates("a", 10), _candidates("b", 10), _candidates("c", 10)
    plan = plan_claim(_situation([*a, *b, *c], want=9, tenant_in_flight={"a": 2}))
    counts = Counter(p.candidate.tenant for p in plan.picks)
    # b and c catch up with a's two in flight first, then all three alternate: afterwards no
    # tenant has more than one item in flight more than another.
    assert [p.candidate.tenant for p in plan.picks][:4] == ["b", "c", "b", "c"]
    in_flight = {t: counts[t] + (2 if t == "a" else 0) for t in "abc"}
    assert max(in_flight.values()) - min(in_flight.values()) <= 1


def test_the_tenant_cap_bounds_leased_items_per_tenant() -> None:
    plan = plan_claim(
        _situation(
            [*_candidates("a", 10), *_candidates("b", 10)],
            want=10,
            tenant_in_flight={"a": 1},
            tenant_cap=3,
        )
    )
    counts = Counter(p.candidate.tenant for p in plan.picks)
    assert counts == {"a": 2, "b": 3}


def test_within_a_tenant_the_best_ranked_item_goes_first() -> None:
    high = rank_at(NOW, Priority.HIGH)
    low_old = rank_at(NOW - timedelta(minutes=10), Priority.LOW)  # waited long: ageing
    normal = rank_at(NOW, Priority.NORMAL)
    items = [
        Candidate(uuid4(), "t", None, "story_generate", at, 0, 100)
        for at in (normal, high, low_old)
    ]
    plan = plan_claim(_situation(items, want=3))
    assert [p.candidate.rank_at for p in plan.picks] == [low_old, high, normal]


@given(st.sampled_from(list(Priority)), st.sampled_from(list(Priority)), st.floats(0, 3600))
def test_ageing_an_item_is_overtaken_only_by_items_enqueued_within_its_head_start(
    first: Priority, second: Priority, later_by: float
) -> None:
    step = 60.0
    early = rank_at(NOW, first, step)
    late = rank_at(NOW + timedelta(seconds=later_by), second, step)
    overtaken = late < early
    delays = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 3}
    assert overtaken == (later_by < (delays[first] - delays[second]) * step)


# -- provider limits ----------------------------------------------------------------------------


def test_a_route_at_its_concurrency_takes_nothing_and_says_so() -> None:
    limits = ProviderLimits({MODEL: RouteLimits(concurrency=4)})
    plan = plan_claim(
        _situation(
            _candidates("t", 10), want=10, limits=limits, routes={MODEL: RouteState(in_flight=2)}
        )
    )
    assert len(plan.picks) == 2
    assert plan.blocked == {MODEL: Blocked.CONCURRENCY}
    assert plan.retry_in is None  # room comes back when a call ends, not at a known time


def test_requests_per_minute_are_a_token_bucket_of_one_second() -> None:
    limits = ProviderLimits({MODEL: RouteLimits(rpm=600)})  # 10 per second
    plan = plan_claim(_situation(_candidates("t", 50), want=50, limits=limits))
    assert len(plan.picks) == 10
    assert plan.blocked == {MODEL: Blocked.REQUESTS}
    assert plan.retry_in == pytest.approx(0.1)
    request_tat, _ = plan.routes[MODEL]
    assert request_tat == NOW + timedelta(seconds=1)
    # The next claim, half a second later, finds room for five more.
    later = plan_claim(
        _situation(
            _candidates("t", 50),
            want=50,
            limits=limits,
            now=NOW + timedelta(seconds=0.5),
            routes={MODEL: RouteState(request_tat=request_tat)},
        )
    )
    assert len(later.picks) == 5


def test_tokens_per_minute_count_each_call_s_reservation() -> None:
    limits = RouteLimits(tpm=600_000, max_tokens=100)  # 10,000 tokens per second
    one = reservation(_candidates("t", 1)[0], limits)[0]
    plan = plan_claim(
        _situation(_candidates("t", 20), want=20, limits=ProviderLimits({MODEL: limits}))
    )
    assert len(plan.picks) == 10_000 // one
    assert plan.blocked == {MODEL: Blocked.TOKENS}


def test_a_call_bigger_than_the_bucket_goes_when_the_bucket_is_full() -> None:
    limits = ProviderLimits({MODEL: RouteLimits(tpm=600, max_tokens=5000)})
    plan = plan_claim(_situation(_candidates("t", 3), want=3, limits=limits))
    assert len(plan.picks) == 1  # never starved, one at a time


def test_a_paused_route_takes_nothing_until_its_retry_after() -> None:
    pause = RouteState(paused_until=NOW + timedelta(seconds=2))
    plan = plan_claim(
        _situation(
            _candidates("t", 3),
            want=3,
            limits=ProviderLimits({MODEL: RouteLimits()}),
            routes={MODEL: pause},
        )
    )
    assert plan.picks == []
    assert plan.blocked == {MODEL: Blocked.PAUSED}
    assert plan.retry_in == pytest.approx(2.0)


def test_a_blocked_route_does_not_hold_up_items_of_another_route() -> None:
    def resolve(_function: str, org: str | None) -> str:
        return "slow" if org == "o1" else "fast"

    limits = ProviderLimits({"slow": RouteLimits(concurrency=1), "fast": RouteLimits()})
    items = [*_candidates("org:o1", 5, org="o1"), *_candidates("org:o2", 5, org="o2")]
    plan = plan_claim(
        _situation(
            items, want=6, resolve=resolve, limits=limits, routes={"slow": RouteState(in_flight=1)}
        )
    )
    assert {p.candidate.org_id for p in plan.picks} == {"o2"}
    assert len(plan.picks) == 5


# -- budgets --------------------------------------------------------------------------------------


def _budget(limit: int, spent: int, outstanding: int = 0) -> BudgetState:
    return BudgetState(limit, None, spent, Decimal(0), outstanding)


def test_claims_stop_at_the_budget_and_park_the_org_once_nothing_is_outstanding() -> None:
    limits = ProviderLimits({MODEL: RouteLimits(max_tokens=100)})
    one, _ = reservation(_candidates("org:o", 1, org="o")[0], limits.for_model(MODEL))
    items = _candidates("org:o", 10, org="o")
    plan = plan_claim(
        _situation(items, want=10, limits=limits, budgets={ORG_O: _budget(3 * one + 5, 0)})
    )
    assert len(plan.picks) == 3
    assert plan.park == {}  # its three reservations may settle lower: wait, do not park
    spent = plan_claim(
        _situation(items, want=10, limits=limits, budgets={ORG_O: _budget(3 * one + 5, 3 * one)})
    )
    assert spent.picks == []
    assert "budget of org o used up" in spent.park[ORG_O].reason


def test_a_cost_budget_counts_the_prices_of_the_route() -> None:
    limits = RouteLimits(max_tokens=1000, prompt_price=Decimal(2), completion_price=Decimal(8))
    candidate = _candidates("org:o", 1, org="o")[0]
    tokens, cost = reservation(candidate, limits)
    prompt = tokens - 1000
    assert cost == (Decimal(prompt) * 2 + Decimal(1000) * 8) / 1_000_000
    budget = BudgetState(None, cost * 2, 0, Decimal(0), 0)
    plan = plan_claim(
        _situation(
            _candidates("org:o", 5, org="o"),
            want=5,
            limits=ProviderLimits({MODEL: limits}),
            budgets={ORG_O: budget},
        )
    )
    assert len(plan.picks) == 2


def test_an_org_without_a_budget_is_not_limited_and_others_are_not_held_up() -> None:
    plan = plan_claim(
        _situation(
            [*_candidates("org:o", 3, org="o"), *_candidates("org:free", 3, org="free")],
            want=6,
            budgets={ORG_O: _budget(0, 0)},
        )
    )
    assert {p.candidate.org_id for p in plan.picks} == {"free"}
    assert set(plan.park) == {ORG_O}


# -- nested budgets -------------------------------------------------------------------------------

PROJECTS = ("p1", "p2")
THREADS = tuple(UUID(int=n + 1) for n in range(4))
PARENT = UUID(int=99)


def _nested(count: int, *, org: str = "o") -> list[Candidate]:
    """Items of one org spread over two projects and four threads (children of one parent)."""
    return [
        Candidate(
            work_item_id=UUID(int=1000 + n),
            tenant=f"org:{org}",
            org_id=org,
            function_key="story_generate",
            rank_at=NOW - timedelta(seconds=1000 - n),
            attempt=0,
            prompt_bytes=800,
            project_id=PROJECTS[n % 2],
            thread_id=THREADS[n % 4],
            parent_thread_id=PARENT,
        )
        for n in range(count)
    ]


def test_a_call_belongs_to_every_scope_outermost_first() -> None:
    item = _nested(1)[0]
    assert item.scopes(MODEL) == [
        (ScopeKind.ORG, "o"),
        (ScopeKind.PROJECT, "p1"),
        (ScopeKind.THREAD, str(PARENT)),
        (ScopeKind.THREAD, str(THREADS[0])),
        (ScopeKind.ROUTE, MODEL),
    ]
    assert _candidates("project:x", 1)[0].scopes(None) == []


def test_a_project_budget_parks_its_items_only_and_the_org_goes_on() -> None:
    limits = ProviderLimits({MODEL: RouteLimits(max_tokens=100)})
    items = _nested(8)
    plan = plan_claim(
        _situation(
            items,
            want=8,
            limits=limits,
            budgets={(ScopeKind.PROJECT, "p1"): _budget(0, 0)},
        )
    )
    assert {p.candidate.project_id for p in plan.picks} == {"p2"}
    assert len(plan.picks) == 4
    park = plan.park[(ScopeKind.PROJECT, "p1")]
    assert "budget of project p1 used up" in park.reason
    assert set(park.items) == {c.work_item_id for c in items if c.project_id == "p1"}


def test_a_route_budget_counts_every_org() -> None:
    limits = ProviderLimits({MODEL: RouteLimits(max_tokens=100)})
    one, _ = reservation(_nested(1)[0], limits.for_model(MODEL))
    items = [*_nested(4, org="a"), *_nested(4, org="b")]
    items = [Candidate(**{**vars(c), "work_item_id": UUID(int=n)}) for n, c in enumerate(items)]
    plan = plan_claim(
        _situation(
            items,
            want=8,
            limits=limits,
            budgets={(ScopeKind.ROUTE, MODEL): _budget(3 * one, 0)},
        )
    )
    assert len(plan.picks) == 3
    assert plan.park == {}  # its reservations may settle lower


def test_an_outstanding_reservation_in_any_refusing_scope_means_wait_not_park() -> None:
    limits = ProviderLimits({MODEL: RouteLimits(max_tokens=100)})
    plan = plan_claim(
        _situation(
            _nested(4),
            want=4,
            limits=limits,
            budgets={
                (ScopeKind.ORG, "o"): _budget(0, 0, outstanding=0),
                (ScopeKind.THREAD, str(PARENT)): _budget(0, 0, outstanding=1),
            },
        )
    )
    assert plan.picks == []
    assert set(plan.park) == {(ScopeKind.ORG, "o")}  # the org has nothing to settle


_limit = st.one_of(st.none(), st.integers(min_value=0, max_value=20_000))


@settings(max_examples=200, deadline=None)
@given(
    org=_limit,
    projects=st.tuples(_limit, _limit),
    parent=_limit,
    threads=st.tuples(_limit, _limit, _limit, _limit),
    route=_limit,
    spent=st.integers(min_value=0, max_value=5_000),
    count=st.integers(min_value=1, max_value=24),
)
def test_admission_never_passes_any_enclosing_limit(  # noqa: PLR0917 - one per scope kind
    org: int | None,
    projects: tuple[int | None, int | None],
    parent: int | None,
    threads: tuple[int | None, ...],
    route: int | None,
    spent: int,
    count: int,
) -> None:
    limits = ProviderLimits({MODEL: RouteLimits(max_tokens=500)})
    items = _nested(count)
    limit_of: dict[Scope, int | None] = {
        (ScopeKind.ORG, "o"): org,
        (ScopeKind.PROJECT, "p1"): projects[0],
        (ScopeKind.PROJECT, "p2"): projects[1],
        (ScopeKind.THREAD, str(PARENT)): parent,
        **{(ScopeKind.THREAD, str(t)): threads[n] for n, t in enumerate(THREADS)},
        (ScopeKind.ROUTE, MODEL): route,
    }
    budgets = {
        scope: _budget(limit, min(spent, limit)) for scope, limit in limit_of.items() if limit
    }
    plan = plan_claim(_situation(items, want=count, limits=limits, budgets=budgets))
    for scope, budget in budgets.items():
        admitted = sum(p.tokens for p in plan.picks if scope in p.candidate.scopes(p.model))
        assert budget.token_limit is not None
        assert budget.tokens + admitted <= budget.token_limit
    # no false refusal: an item refused has a scope it does not fit
    picked = {p.candidate.work_item_id for p in plan.picks}
    used = dict.fromkeys(budgets, 0)
    for p in plan.picks:
        for scope in p.candidate.scopes(p.model):
            if scope in used:
                used[scope] += p.tokens
    one, _ = reservation(items[0], limits.for_model(MODEL))
    for item in items:
        if item.work_item_id in picked:
            continue
        assert any(
            budgets[scope].tokens + used[scope] + one > (budgets[scope].token_limit or 0)
            for scope in item.scopes(MODEL)
            if scope in budgets
        ) or any(
            scope[0] is ScopeKind.ORG
            and budgets[scope].tokens + used[scope] + one > (budgets[scope].token_limit or 0)
            for scope in budgets
        )


# -- the size of a prompt, before it is rendered --------------------------------------------------

_texts = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=80)


@settings(max_examples=300)
@given(
    epic_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,30}", fullmatch=True),
    title=_texts.filter(lambda t: t.strip()),
    backlog_title=_texts,
    description=st.none() | _texts,
    stories=st.integers(0, 50),
)
def test_the_prompt_bound_holds_for_any_fields(
    epic_id: str, title: str, backlog_title: str, description: str | None, stories: int
) -> None:
    epic = Epic.model_validate(
        {
            "title": title,
            "description": description or "",
            "stories": [{"story_key": f"S{n}", "title": "t"} for n in range(stories)],
        }
    )
    prompt, _ = render_story_prompt(epic_id=epic_id, epic=epic, backlog_title=backlog_title)
    bound = prompt_bytes_bound(
        epic_id_bytes=len(epic_id.encode()),
        title_bytes=len(epic.title.encode()),
        backlog_title_bytes=len(backlog_title.encode()),
        description_bytes=len((epic.description or "").encode()),
    )
    assert len(prompt.encode()) <= bound


# -- limits configuration and Retry-After -------------------------------------------------------


def test_limits_parse_and_refuse_nonsense(tmp_path: Path) -> None:
    limits = ProviderLimits.parse(
        {"m": {"concurrency": 8, "rpm": 600, "prompt_price": "0.15"}, "*": {"tpm": 1000}}
    )
    assert limits.for_model("m").concurrency == 8
    assert limits.for_model("m").prompt_price == Decimal("0.15")
    assert limits.for_model("other").tpm == 1000
    bad: dict[str, Any]
    for bad in (
        {"m": {"concurrency": 0}},
        {"m": {"rpm": "many"}},
        {"m": {"prompt_price": -1}},
        {"m": {"prompt_price": "NaN"}},
        {"m": {"burst_seconds": 0}},
        {"m": {"typo": 1}},
        {"m": []},
    ):
        with pytest.raises(ConfigurationError):
            ProviderLimits.parse(bad)
    both = tmp_path / "routes.json"
    both.write_text(json.dumps({"routes": {"*": "m"}, "limits": {"m": {"rpm": 60}}}))
    assert load_llm_file(both) == ({"*": "m"}, {"m": {"rpm": 60}})
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"routes": "m-routes", "*": "m"}))  # a function key "routes"
    assert load_llm_file(flat) == ({"routes": "m-routes", "*": "m"}, {})


def test_retry_after_reads_seconds_and_http_dates_within_bounds() -> None:
    assert retry_after("7") == 7.0
    assert retry_after(" 0 ") == 0.0
    assert retry_after("99999999") == 3600.0
    assert retry_after(format_datetime(NOW + timedelta(seconds=30), usegmt=True), NOW) == 30.0
    assert retry_after(format_datetime(NOW - timedelta(seconds=30), usegmt=True), NOW) == 0.0
    for junk in (None, "", "soon", "-5", "1.5e9x"):
        assert retry_after(junk) is None


# -- attempts a 429 does not count ----------------------------------------------------------------


def _entry(
    attempt: int, entry_type: EntryType, payload: Mapping[str, object], seq: int
) -> LedgerEntry:
    return LedgerEntry(
        uuid4(),
        seq,
        UUID(int=1),
        UUID(int=2),
        attempt,
        entry_type,
        payload,
        content_hash(payload),
        NOW,
    )


def test_rate_limited_attempts_do_not_count_towards_the_limit_up_to_a_bound() -> None:
    policy = RetryStrategy(max_attempts=2, free_rate_limited=3)
    refused = {"kind": FailureKind.RATE_LIMITED.value, "disposition": "retry"}
    entries = [
        e
        for n in (1, 2, 3)
        for e in (
            _entry(n, EntryType.PROMPT, {"prompt": "p"}, 2 * n),
            _entry(n, EntryType.ERROR, refused, 2 * n + 1),
        )
    ]
    assert next_step(3, entries, policy) == Start(4)  # three 429s, none counted
    more = [
        *entries,
        _entry(4, EntryType.PROMPT, {"prompt": "p"}, 20),
        _entry(4, EntryType.ERROR, refused, 21),
        _entry(5, EntryType.PROMPT, {"prompt": "p"}, 22),
        _entry(5, EntryType.ERROR, {"kind": "transient", "disposition": "retry"}, 23),
    ]
    assert next_step(5, more, policy) == Exhausted(2)  # only 3 of the 4 429s are free
    decision = policy.get_retry_decision(1, FailureKind.RATE_LIMITED, NOW)
    assert isinstance(decision, RetryDecision)


def test_history_tells_refused_calls_and_canceled_items_apart() -> None:
    refused = {"kind": "rate_limited", "disposition": "retry"}
    canceled = {"kind": "canceled", "disposition": "canceled"}
    entries = [
        _entry(1, EntryType.PROMPT, {"prompt": "p"}, 1),
        _entry(1, EntryType.ERROR, refused, 2),
        _entry(2, EntryType.PROMPT, {"prompt": "p"}, 3),
        _entry(2, EntryType.RESPONSE, {"content": "{}", "model": "m", "usage": {}}, 4),
        _entry(2, EntryType.ERROR, canceled, 5),
    ]
    history = reconstruct(entries)
    assert history.consistent, history.problems
    (item,) = history.items.values()
    assert item.outcome is ItemOutcome.CANCELED
    assert item.paid_calls == 1  # the 429 was not paid
