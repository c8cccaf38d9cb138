"""The deterministic ``StubSynthesizer``: the default ``Synthesizer`` (ADR-0008).

Same request in, same response out: the content depends only on the request (function key,
prompt, input) and on the injected clock, which stamps ``generated_at``. It never fails and
never sleeps. Its output shape per function key is locked by the golden files in
``tests/golden/synthesis/`` (``SPECTRAL_GOLDEN_UPDATE=1`` regenerates them); a real
implementation (``spectral.llm.openai_compat``) must produce compatible content (field names and
types), so nothing downstream branches on "stub or real".

Shapes (``content`` is always one JSON object, keys sorted, UTF-8):

* ``story_generate`` — ``{"generated_at", "generator", "stories": [{"acceptance_criteria",
  "description", "story_key", "title"}, ...]}``; input ``epic_id``, ``epic_title``,
  optional ``epic_description`` and ``story_count`` (1..10; default 1 + digest % 3);
* ``rule_stub`` — ``{"generated_at", "generator", "rule_stub"}`` where ``rule_stub`` is a text
  rule skeleton built from the input's scalar fields only (no time in it: it is stable across
  calls, so a payload hash that includes it does not churn);
* any other key — ``{"digest", "function_key", "generated_at", "generator", "input_keys",
  "summary"}``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from spectral.llm.seam import SynthesisRequest, SynthesisResponse

Clock = Callable[[], datetime]

STUB_MODEL: Final = "stub-deterministic-v1"
"""The ``model`` the stub reports (it is not a provider model: no routing involved)."""

_MAX_STORIES: Final = 10
_VERBS: Final = ("review", "plan", "track", "export", "configure", "audit", "share", "archive")
_ROLES: Final = ("a user", "an operator", "an admin", "a reviewer")


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _digest(request: SynthesisRequest) -> str:
    material = _dumps(
        {"function_key": request.function_key, "prompt": request.prompt, "input": request.input}
    )
    # surrogatepass: a prompt may hold a lone surrogate (any str is a prompt); valid text
    # encodes as UTF-8 all the same, so the digests of the golden files do not move.
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


def _stamp(clock: Clock) -> str:
    now = clock().astimezone(UTC).replace(tzinfo=None)
    return now.isoformat(timespec="microseconds") + "Z"


def _story_count(value: Any, digest: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return max(1, min(value, _MAX_STORIES))
    return 1 + int(digest[:8], 16) % 3


def _stories(request: SynthesisRequest, digest: str) -> list[dict[str, Any]]:
    data = request.input
    epic_id = str(data.get("epic_id", "epic"))
    title = str(data.get("epic_title") or epic_id).strip()
    description = str(data.get("epic_description") or "").strip()
    count = _story_count(data.get("story_count"), digest)
    stories: list[dict[str, Any]] = []
    start = int(digest[:4], 16)
    for index in range(count):
        seed = int(digest[index * 4 + 4 : index * 4 + 8], 16)
        verb = _VERBS[(start + index) % len(_VERBS)]
        role = _ROLES[seed % len(_ROLES)]
        criteria = [
            f"Given {role}, when they {verb} {title}, then the change is saved",
            f"The {verb} action is recorded with who did it and when",
        ]
        if description:
            criteria.append(f"It satisfies the epic: {description[:120]}")
        stories.append(
            {
                "story_key": f"{epic_id}-{index + 1}",
                "title": f"As {role} I can {verb} {title}",
                "description": f"Story {index + 1} of {count} for epic {title}.",
                "acceptance_criteria": criteria,
            }
        )
    return stories


def _rule_stub(request: SynthesisRequest) -> str:
    scalars = {
        key: value
        for key, value in sorted(request.input.items())
        if isinstance(value, str | int | bool)
    }
    if not scalars:
        return "WHEN true THEN flag"
    conditions = " AND ".join(
        f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in scalars.items()
    )
    return f"WHEN {conditions} THEN flag"


class StubSynthesizer:
    """Deterministic ``Synthesizer``; ``clock`` stamps ``generated_at`` (inject a fixed one)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or _utc_now

    def render(self, request: SynthesisRequest) -> dict[str, Any]:
        """The JSON object the stub answers with (``content`` is its canonical text)."""
        digest = _digest(request)
        body: dict[str, Any] = {"generated_at": _stamp(self._clock), "generator": "stub"}
        if request.function_key == "story_generate":
            body["stories"] = _stories(request, digest)
        elif request.function_key == "rule_stub":
            body["rule_stub"] = _rule_stub(request)
        else:
            first_line = request.prompt.strip().splitlines()[0] if request.prompt.strip() else ""
            body.update(
                {
                    "digest": digest[:32],
                    "function_key": request.function_key,
                    "input_keys": sorted(str(key) for key in request.input),
                    "summary": first_line[:200],
                }
            )
        return body

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        content = _dumps(self.render(request))
        prompt_tokens = len(request.prompt.split()) + len(_dumps(request.input).split(","))
        completion_tokens = len(content.split())
        return SynthesisResponse(
            content=content,
            model=STUB_MODEL,
            usage={
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        )
