"""`spectral work reconcile` against the spend ledger in PostgreSQL: a billing export that
matches exits 0; calls billed but unknown to the ledger, calls settled but not billed, amounts
that differ, calls of unknown outcome the provider billed and keys billed twice are each
reported (text and JSON, with drift per route and org) and exit 1; a file that is not an export
exits 2."""

from __future__ import annotations

import json
from pathlib import Path
from uuid import uuid4

import pytest

from consumers.work_executor.claims import ClaimRepository
from producers.work.commands import GenerateAll
from spectral.db.connect import create_pool
from spectral.llm.limits import ProviderLimits, RouteLimits
from tests.integration.work.support import backlog, harness
from tests.integration.work.test_cli import _spectral

pytestmark = pytest.mark.integration

MODEL = "m-billed"


async def _ledger(database_url: str) -> list[tuple[str, int]]:
    """Five paid calls of org acme: four settled (100, 200, 300, 400 tokens), one of unknown
    outcome; their Idempotency-Keys with the tokens recorded (the reservation of the last)."""
    async with harness(database_url) as h:
        await h.admin.execute(
            "INSERT INTO work.provider_routes (model, probation) VALUES ($1, false)", MODEL
        )
        await h.commands.put_document("p1", "d1", backlog(*(f"E{n}" for n in range(5))))
        await h.commands.generate_all(GenerateAll("p1", "d1", org_id="acme"))
        pool = await create_pool(database_url, role="spectral_executor", max_size=1)
        try:
            claims = ClaimRepository(
                pool,
                resolve=lambda _f, _o: MODEL,
                limits=ProviderLimits({MODEL: RouteLimits(max_tokens=500)}),
            )
            jobs = (await claims.claim(5, uuid4(), "w")).jobs
        finally:
            await pool.close()
        keys = []
        for n, (item, _) in enumerate(sorted(jobs)):
            tokens = 100 * (n + 1)
            if n < 4:
                await h.admin.execute(
                    "UPDATE work.spend SET state = 'settled', settled_at = now(), tokens = $2, "
                    "cost = $2::bigint * 0.001 WHERE work_item_id = $1",
                    item,
                    tokens,
                )
            else:  # counted at its reservation
                tokens = await h.admin.fetchval(
                    "UPDATE work.spend SET state = 'unknown' WHERE work_item_id = $1 "
                    "RETURNING reserved_tokens",
                    item,
                )
            keys.append((f"{item}:1", tokens))
        return keys


async def test_a_matching_export_is_clean_and_every_discrepancy_is_reported(
    database_url: str, spectral_env: dict[str, str], tmp_path: Path
) -> None:
    keys = await _ledger(database_url)
    settled = keys[:4]
    clean = tmp_path / "clean.csv"
    clean.write_text(
        "idempotency_key,tokens,cost\n" + "".join(f"{k},{t},{t * 0.001:.3f}\n" for k, t in settled),
        encoding="utf-8",
    )
    ok = _spectral(spectral_env, "work", "reconcile", str(clean))
    assert "4 billed row(s), 4 matched the ledger" in ok.stdout
    assert "0 discrepancy(ies), 0 invalid row(s)" in ok.stdout

    stranger = f"{uuid4()}:1"
    hostile = tmp_path / "usage.jsonl"
    rows = [
        {"idempotency_key": settled[0][0], "tokens": settled[0][1]},
        {"idempotency_key": settled[1][0], "tokens": settled[1][1] + 55},  # billed more
        {"idempotency_key": settled[2][0], "tokens": settled[2][1], "cost": "9"},  # cost
        {"idempotency_key": keys[4][0], "tokens": 700},  # our outcome unknown: it was done
        {"idempotency_key": stranger, "tokens": 5},  # not ours
        {"call_id": "req_abc", "tokens": 6},  # not even a key of ours
        {"idempotency_key": settled[0][0], "tokens": settled[0][1]},  # billed twice
    ]  # settled[3] is not billed
    hostile.write_bytes(b"\n".join(json.dumps(r).encode() for r in rows) + b"\n\xc3\x28 broken\n")
    found = _spectral(spectral_env, "work", "reconcile", str(hostile), "--json", check=False)
    assert found.returncode == 1, found.stderr
    report = json.loads(found.stdout)
    assert report["clean"] is False
    assert {e["key"] for e in report["unknown_to_ledger"]} == {stranger, "req_abc"}
    assert [e["key"] for e in report["not_billed"]] == [settled[3][0]]
    assert {e["key"] for e in report["amount_differs"]} == {settled[1][0], settled[2][0]}
    assert [e["key"] for e in report["billed_unknown_outcome"]] == [keys[4][0]]
    assert report["duplicates"] == [settled[0][0]]
    assert report["invalid"] == [{"line": 8, "why": "not UTF-8 (byte 0)"}]
    route = report["by_route"][MODEL]
    assert route["token_drift"] == 55 + 700 - keys[4][1] - settled[3][1]
    assert report["by_org"]["acme"]["billed_tokens"] == route["billed_tokens"]
    text = _spectral(spectral_env, "work", "reconcile", str(hostile), check=False)
    assert text.returncode == 1
    assert "settled in the ledger but not billed: 1" in text.stdout
    assert "invalid line 8: not UTF-8" in text.stdout

    missing = tmp_path / "usage.csv"
    missing.write_text("request,amount\nx,1\n", encoding="utf-8")
    refused = _spectral(spectral_env, "work", "reconcile", str(missing), check=False)
    assert refused.returncode == 2
    assert "needs an idempotency_key" in refused.stderr
