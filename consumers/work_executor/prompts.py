"""The prompt of a story-generation work item, rendered from the document at execution time.
Pure. The rendered prompt is recorded in the ledger before the call (what was paid for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from spectral.work.documents import Epic

PROMPT_VERSION: Final = "story_generate/v1"

_TEMPLATE: Final = """Generate user stories for epic {epic_id}: {title}
Backlog: {backlog_title}
Epic description: {description}
Stories the epic has now: {existing}

Answer with one JSON object and nothing else, of this form:
{{"stories": [{{"story_key": "{epic_id}-1", "title": "As a ... I can ...", "description": "...",
"acceptance_criteria": ["..."]}}]}}
Between 1 and 10 stories; story_key values unique within the epic."""


def render_story_prompt(
    *, epic_id: str, epic: Epic, backlog_title: str
) -> tuple[str, Mapping[str, Any]]:
    """The prompt text and the structured input the synthesizer gets alongside it."""
    prompt = _TEMPLATE.format(
        epic_id=epic_id,
        title=epic.title,
        backlog_title=backlog_title or "(untitled)",
        description=epic.description or "(none)",
        existing=len(epic.stories),
    )
    data: dict[str, Any] = {
        "epic_id": epic_id,
        "epic_title": epic.title,
        "epic_description": epic.description,
        "prompt_version": PROMPT_VERSION,
    }
    return prompt, data
