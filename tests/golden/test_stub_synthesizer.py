"""Golden files lock the StubSynthesizer's output shape (ADR-0008 §3).

Each case is a representative request; ``tests/golden/synthesis/<case>.json`` holds the request
and the exact response. ``SPECTRAL_GOLDEN_UPDATE=1 pytest tests/golden`` regenerates them; review
the diff before committing it — it is the shape contract a real model's output must keep.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from spectral.llm.seam import SynthesisRequest, Synthesizer
from spectral.llm.stub import STUB_MODEL, StubSynthesizer

GOLDEN_DIR = Path(__file__).with_name("synthesis")
FIXED = datetime(2026, 1, 9, 12, 0, 0, 250000, tzinfo=UTC)

CASES: dict[str, SynthesisRequest] = {
    "story_epic_with_description": SynthesisRequest(
        function_key="story_generate",
        prompt="Generate user stories for epic E-1: Checkout.",
        input={
            "epic_id": "E-1",
            "epic_title": "Checkout",
            "epic_description": "Customers pay for the basket with a card or a voucher.",
        },
        idempotency_key="00000000-0000-0000-0000-000000000001:1",
    ),
    "story_epic_title_only_explicit_count": SynthesisRequest(
        function_key="story_generate",
        prompt="Generate user stories for epic E-2: Search.",
        input={"epic_id": "E-2", "epic_title": "Search", "story_count": 4},
        idempotency_key="00000000-0000-0000-0000-000000000002:1",
        org_id="org-7",
    ),
    "story_epic_non_ascii": SynthesisRequest(
        function_key="story_generate",
        prompt="Générer des histoires pour l'épopée « Réservation ».",
        input={"epic_id": "É-3", "epic_title": "Réservation 予約", "story_count": 2},
        idempotency_key="00000000-0000-0000-0000-000000000003:2",
    ),
    "rule_stub_for_failure_cluster": SynthesisRequest(
        function_key="rule_stub",
        prompt="Suggest a rule for failures of rule R-12 on tenant t-1.",
        input={
            "rule_id": "R-12",
            "failure_class": "timeout",
            "occurrences": 42,
            "evidence": [{"failure_id": "f-1"}],
        },
        idempotency_key="cluster-9:abc",
    ),
    "unknown_function_key_generic": SynthesisRequest(
        function_key="summarize_thread",
        prompt="Summarize thread 42\nwith its ledger.",
        input={"thread_id": "42", "entries": 7},
        idempotency_key="t-42:1",
    ),
    "empty_input_and_prompt": SynthesisRequest(
        function_key="rule_stub", prompt="", input={}, idempotency_key="empty:1"
    ),
}


def _request_json(request: SynthesisRequest) -> dict[str, Any]:
    return {
        "function_key": request.function_key,
        "prompt": request.prompt,
        "input": dict(request.input),
        "idempotency_key": request.idempotency_key,
        "org_id": request.org_id,
    }


@pytest.mark.parametrize("case", sorted(CASES))
async def test_stub_output_matches_its_golden_file(case: str) -> None:
    request = CASES[case]
    response = await StubSynthesizer(clock=lambda: FIXED).synthesize(request)
    actual = {
        "request": _request_json(request),
        "response": {
            "model": response.model,
            "usage": dict(response.usage),
            "content": json.loads(response.content),
        },
    }
    path = GOLDEN_DIR / f"{case}.json"
    if os.environ.get("SPECTRAL_GOLDEN_UPDATE") == "1":
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(
            json.dumps(actual, indent=2, ensure_ascii=False, sort_keys=True) + "\n",
            encoding="utf-8",
        )
    assert path.exists(), f"missing golden file {path.name}: run with SPECTRAL_GOLDEN_UPDATE=1"
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert actual == expected
    # The content on the wire is the canonical text of the golden object.
    assert response.content == json.dumps(
        expected["response"]["content"], sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )


async def test_the_stub_is_deterministic_and_uses_only_its_clock() -> None:
    request = CASES["story_epic_with_description"]
    one = await StubSynthesizer(clock=lambda: FIXED).synthesize(request)
    two = await StubSynthesizer(clock=lambda: FIXED).synthesize(request)
    later = await StubSynthesizer(clock=lambda: FIXED.replace(year=2027)).synthesize(request)
    assert one == two
    assert one.model == STUB_MODEL
    assert json.loads(later.content)["stories"] == json.loads(one.content)["stories"]
    assert json.loads(later.content)["generated_at"] == "2027-01-09T12:00:00.250000Z"


async def test_rule_stub_text_does_not_depend_on_time() -> None:
    request = CASES["rule_stub_for_failure_cluster"]
    one = json.loads((await StubSynthesizer(clock=lambda: FIXED).synthesize(request)).content)
    two = json.loads((await StubSynthesizer().synthesize(request)).content)
    assert one["rule_stub"] == two["rule_stub"]
    assert one["rule_stub"].startswith('WHEN failure_class = "timeout"')


def test_the_stub_satisfies_the_seam() -> None:
    assert isinstance(StubSynthesizer(), Synthesizer)
