"""Validation of a model's answer (the ``parse_report`` of ADR-035 §7.1). Pure.

The answer must be one JSON object with ``stories``: 1..50 stories of the document schema,
``story_key`` unique. Unknown top-level fields (``generated_at``, ``generator`` of the stub)
are ignored. A single Markdown code fence around the JSON is tolerated. An invalid answer is a
permanent failure of the item (it is dead-lettered; a user retry asks again).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spectral.work.documents import MAX_STORIES_PER_EPIC, Story

_FENCE: Final = re.compile(r"^\s*```(?:json)?\s*\n(?P<body>.*)\n\s*```\s*$", re.DOTALL)
_MAX_ERRORS: Final = 5


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    stories: tuple[Story, ...] = Field(min_length=1, max_length=MAX_STORIES_PER_EPIC)


@dataclass(frozen=True)
class ParseReport:
    stories: tuple[Story, ...]
    errors: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.errors

    def payload(self, response_attempt: int) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": list(self.errors),
            "story_count": len(self.stories),
            "response_attempt": response_attempt,
        }


def _invalid(errors: tuple[str, ...]) -> ParseReport:
    return ParseReport((), errors)


def parse_report(content: str) -> ParseReport:
    fenced = _FENCE.match(content)
    text = fenced.group("body") if fenced else content
    try:
        data = json.loads(text)
    except ValueError as exc:
        return _invalid((f"not JSON: {exc}",))
    if not isinstance(data, dict):
        return _invalid(("not a JSON object",))
    try:
        answer = _Answer.model_validate(data)
    except ValidationError as exc:
        errors = tuple(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:_MAX_ERRORS]
        )
        return _invalid(errors)
    keys = [story.story_key for story in answer.stories]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        return _invalid((f"duplicate story_key: {', '.join(duplicates)}",))
    return ParseReport(answer.stories, ())
