"""The triage endpoints against the real database: paging, filters, ETag/If-Match, the audit
trail, and the transition policy enforced by the database itself."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from consumers.rule_candidates.transitions import ALLOWED, Status
from spectral.settings import Settings
from tests.integration.api.support import seed_clusters, surface
from tests.support import database_login

pytestmark = pytest.mark.integration


async def test_pages_cover_every_cluster_once_in_each_sort(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    ids = set(await seed_clusters(database_url, 23))
    async with surface(settings, database_url, kafka_bootstrap) as s:
        http = await s.client(TRIAGE_READ)
        for sort in ("severity", "newest", "oldest", "failures", "signaled"):
            seen: list[str] = []
            cursor = None
            while True:
                params = {"sort": sort, "limit": "5", **({"cursor": cursor} if cursor else {})}
                page = await http.get("/clusters", params=params)
                assert page.status_code == 200, page.text
                body = page.json()
                seen += [c["cluster_id"] for c in body["clusters"]]
                cursor = body["next_cursor"]
                if cursor is None:
                    break
            assert len(seen) == len(set(seen)) == 23, sort
            assert {uuid.UUID(x) for x in seen} == ids
        everything = (await http.get("/clusters", params={"limit": "500"})).json()["clusters"]
        ranks = [{"high": 0, "medium": 1, "low": 2}[c["severity"]] for c in everything]
        assert ranks == sorted(ranks)
        # A cursor of one sort is refused by another, and a forged one too.
        first = (await http.get("/clusters", params={"limit": "2"})).json()["next_cursor"]
        wrong = await http.get("/clusters", params={"sort": "oldest", "cursor": first})
        assert wrong.status_code == 400
        assert wrong.headers["content-type"] == "application/problem+json"
        assert wrong.json()["type"] == "/problems/invalid-cursor"
        forged = await http.get("/clusters", params={"cursor": "eyJrIjoiY2x1c3RlcnMifQ"})
        assert forged.status_code == 400


async def test_two_operators_never_lose_each_others_change(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    (cluster,) = await seed_clusters(database_url, 1)
    async with surface(settings, database_url, kafka_bootstrap) as s:
        alice = await s.client(TRIAGE_WRITE, name="alice")
        bob = await s.client(TRIAGE_WRITE, name="bob")
        seen_a = await alice.get(f"/clusters/{cluster}")
        seen_b = await bob.get(f"/clusters/{cluster}")
        assert seen_a.headers["etag"] == seen_b.headers["etag"] == '"0"'
        results = await asyncio.gather(
            alice.patch(
                f"/clusters/{cluster}",
                json={"status": "in_review", "notes": "mine"},
                headers={"If-Match": seen_a.headers["etag"]},
            ),
            bob.patch(
                f"/clusters/{cluster}",
                json={"status": "dismissed", "notes": "noise"},
                headers={"If-Match": seen_b.headers["etag"]},
            ),
        )
        codes = sorted(r.status_code for r in results)
        assert codes == [200, 412], [r.text for r in results]
        loser = next(r for r in results if r.status_code == 412)
        assert loser.json()["type"] == "/problems/stale-version"
        assert loser.json()["current_version"] == 1
        assert loser.headers["etag"] == '"1"'
        winner = next(r for r in results if r.status_code == 200)
        assert winner.headers["etag"] == '"1"'
        # The loser reloads, sees the other change and applies its own on top of it.
        detail = (await bob.get(f"/clusters/{cluster}")).json()
        assert detail["triage_version"] == 1
        assert [a["actor"] for a in detail["audit"]] in (["token:alice"], ["token:bob"])
        # No If-Match: 428; an unusable one: 412.
        bare = await alice.patch(f"/clusters/{cluster}", json={"notes": "x"})
        assert bare.status_code == 428
        assert bare.json()["type"] == "/problems/if-match-required"
        weak = await alice.patch(
            f"/clusters/{cluster}", json={"notes": "x"}, headers={"If-Match": 'W/"1"'}
        )
        assert weak.status_code == 412


async def test_the_audit_trail_records_who_when_and_from_to(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    (cluster,) = await seed_clusters(database_url, 1)
    assignee = uuid.uuid4()
    async with surface(settings, database_url, kafka_bootstrap) as s:
        ops = await s.client(TRIAGE_WRITE, name="ops-carol")
        steps = [
            {"status": "in_review", "assigned_to": str(assignee)},
            {"notes": "looks like a flaky rule"},
            {"status": "resolved"},
            {"notes": "looks like a flaky rule"},  # no change: no audit row, same version
        ]
        version = 0
        for body in steps:
            r = await ops.patch(
                f"/clusters/{cluster}", json=body, headers={"If-Match": f'"{version}"'}
            )
            assert r.status_code == 200, r.text
            version = r.json()["triage_version"]
        detail = (await ops.get(f"/clusters/{cluster}")).json()
    assert detail["status"] == "resolved"
    assert detail["triage_version"] == 3
    audit = detail["audit"]
    assert [a["triage_version"] for a in audit] == [1, 2, 3]
    assert {a["actor"] for a in audit} == {"token:ops-carol"}
    assert audit[0]["changes"] == {
        "status": {"from": "pending", "to": "in_review"},
        "assigned_to": {"from": None, "to": str(assignee)},
    }
    assert audit[1]["changes"] == {"notes": {"from": None, "to": "looks like a flaky rule"}}
    assert audit[2]["changes"] == {"status": {"from": "in_review", "to": "resolved"}}
    assert detail["allowed_statuses"] == ["pending", "in_review"]


async def test_refused_transitions_are_409_and_the_database_refuses_them_too(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    (cluster,) = await seed_clusters(database_url, 1)
    async with surface(settings, database_url, kafka_bootstrap) as s:
        ops = await s.client(TRIAGE_WRITE)
        ok = await ops.patch(
            f"/clusters/{cluster}", json={"status": "dismissed"}, headers={"If-Match": "*"}
        )
        assert ok.status_code == 200
        refused = await ops.patch(
            f"/clusters/{cluster}", json={"status": "resolved"}, headers={"If-Match": '"1"'}
        )
        assert refused.status_code == 409
        assert refused.json()["type"] == "/problems/transition-refused"
        assert refused.json()["allowed_statuses"] == ["pending", "in_review"]
    # Straight SQL as the operator role (a studio, a script): the database allows exactly the
    # pairs the policy allows and refuses every other one.
    conn = await asyncpg.connect(database_url, server_settings={"role": "spectral_operator"})
    set_status = "UPDATE platform.rule_candidates_pending SET status = $2 WHERE cluster_id = $1"
    try:
        rows = await conn.fetch("SELECT from_status, to_status FROM platform.triage_transitions")
        assert {(r["from_status"], r["to_status"]) for r in rows} == {
            (a.value, b.value) for a, targets in ALLOWED.items() for b in targets
        }
        await conn.execute(set_status, cluster, "pending")
        for current in Status:
            async with conn.transaction():
                if current is not Status.PENDING:
                    await conn.execute(set_status, cluster, current.value)
                for target in Status:
                    if target == current:
                        continue
                    if target in ALLOWED[current]:
                        async with conn.transaction():
                            await conn.execute(set_status, cluster, target.value)
                            await conn.execute(set_status, cluster, current.value)
                    else:
                        with pytest.raises(asyncpg.CheckViolationError, match="cannot move"):
                            async with conn.transaction():
                                await conn.execute(set_status, cluster, target.value)
                if current is not Status.PENDING:
                    await conn.execute(set_status, cluster, "pending")
        # The audit trail cannot be written or rewritten by the operator; SQL changes are
        # audited under the database login.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("DELETE FROM platform.triage_audit")
        audit = await conn.fetch(
            "SELECT actor FROM platform.triage_audit WHERE cluster_id = $1 ORDER BY triage_version",
            cluster,
        )
        assert audit[-1]["actor"].startswith("db:")
    finally:
        await conn.close()
    owner = await asyncpg.connect(database_url)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            await owner.execute("UPDATE platform.triage_audit SET actor = 'someone else'")
    finally:
        await owner.close()


async def test_the_audit_trail_names_the_login_a_declared_principal_came_through(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    """spectral.actor is a setting any session may set: someone with their own login can
    declare an API token's principal. The trail then shows the login too, so the change they
    made under 'token:ops-alice' is told apart from ops-alice's own, made through the API."""
    (cluster,) = await seed_clusters(database_url, 1)
    owner = await asyncpg.connect(database_url)
    try:
        api_login = await owner.fetchval("SELECT session_user")
    finally:
        await owner.close()
    async with (
        database_login(database_url, "spectral_operator") as (mallory, mallory_url),
        surface(settings, database_url, kafka_bootstrap) as s,
    ):
        alice = await s.client(TRIAGE_WRITE, name="ops-alice")
        done = await alice.patch(
            f"/clusters/{cluster}", json={"notes": "mine"}, headers={"If-Match": "*"}
        )
        assert done.status_code == 200, done.text
        forger = await asyncpg.connect(mallory_url, server_settings={"role": "spectral_operator"})
        try:
            async with forger.transaction():
                await forger.execute("SELECT set_config('spectral.actor', 'token:ops-alice', true)")
                await forger.execute(
                    "UPDATE platform.rule_candidates_pending SET notes = 'not mine' "
                    "WHERE cluster_id = $1",
                    cluster,
                )
        finally:
            await forger.close()
        audit = (await alice.get(f"/clusters/{cluster}")).json()["audit"]
    assert [(a["actor"], a["db_login"]) for a in audit] == [
        ("token:ops-alice", api_login),
        ("token:ops-alice", mallory),
    ]
