"""Validation of a model's answer (the ``parse_report`` of ADR-035 §7.1). Pure.

The answer must be one JSON object with ``stories``: 1..50 stories of the document schema,
``story_key`` unique. Unknown top-level fields (``generated_at``, ``generator`` of the stub)
are ignored. A single Markdown code fence around the JSON is tolerated. An invalid answer is a
permanent failure of the item (it is dead-lettered; a user retry asks again).

Any text is answered with a report, in time linear in its length: an answer longer than
``MAX_ANSWER_CHARS``, nested deeper than the parser goes (``RecursionError``), or holding text
a document cannot store (U+0000, lone surrogates) is invalid like any other — never an
exception. The fence is found by plain string tests, not a backtracking pattern.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from producers.work.domain.documents import MAX_STORIES_PER_EPIC, Story
from producers.work.domain.payloads import ParseReportPayload, parse_report_payload

_FENCE: Final = "```"
_MAX_ERRORS: Final = 5
MAX_ANSWER_CHARS: Final = 2_000_000
"""Longer answers are refused unread (50 stories with every field at its limit are ~1.6 million
characters of JSON; real answers are a few thousand)."""


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

    def payload(self, response_attempt: int) -> ParseReportPayload:
        return parse_report_payload(
            ok=self.ok,
            errors=list(self.errors),
            story_count=len(self.stories),
            response_attempt=response_attempt,
        )


def _invalid(errors: tuple[str, ...]) -> ParseReport:
    return ParseReport((), errors)


def unfenced(content: str) -> str:
    """The body of a single Markdown code fence around ``content`` (```` ``` ```` or
    ```` ```json ````, each on its own line), or ``content`` itself."""
    text = content.strip()
    if not (text.startswith(_FENCE) and text.endswith(_FENCE)) or len(text) < 2 * len(_FENCE):
        return content
    first_line, newline, rest = text.partition("\n")
    if not newline or first_line[len(_FENCE) :].strip() not in ("", "json"):
        return content
    body, newline, last_line = rest.rpartition("\n")
    if not newline or last_line.strip() != _FENCE:
        return content
    return body


def parse_report(content: str) -> ParseReport:
    if len(content) > MAX_ANSWER_CHARS:
        return _invalid((f"the answer is {len(content)} characters, over {MAX_ANSWER_CHARS}",))
    try:
        data = json.loads(unfenced(content))
    except RecursionError:
        return _invalid(("not JSON: nested too deeply to read",))
    except ValueError as exc:
        return _invalid((f"not JSON: {exc}",))
    if not isinstance(data, dict):
        return _invalid(("not a JSON object",))
    return _stories(data)


def _stories(data: dict[str, Any]) -> ParseReport:
    try:
        answer = _Answer.model_validate(data)
    except RecursionError:
        return _invalid(("nested too deeply to validate",))
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
