"""The prompt of a story-generation work item, rendered from the document at execution time.
Pure. The rendered prompt is recorded in the ledger before the call (what was paid for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from producers.work.domain.documents import Epic

PROMPT_VERSION: Final = "story_generate/v1"

_TEMPLATE: Final = """Generate user stories for epic {epic_id}: {title}
Backlog: {backlog_title}
Epic description: {description}
Stories the epic has now: {existing}

Answer with one JSON object and nothing else, of this form:
{{"stories": [{{"story_key": "{epic_id}-1", "title": "As a ... I can ...", "description": "...",
"acceptance_criteria": ["..."]}}]}}
Between 1 and 10 stories; story_key values unique within the epic."""


_EMPTY: Final = _TEMPLATE.format(
    epic_id="", title="", backlog_title="", description="", existing=""
)
_COUNT_DIGITS: Final = 10
CHAT_OVERHEAD_TOKENS: Final = 16
"""Tokens a chat request adds around its messages (role markers, priming), at most."""


def prompt_bytes_bound(
    *, epic_id_bytes: int, title_bytes: int, backlog_title_bytes: int, description_bytes: int
) -> int:
    """The UTF-8 length of the prompt ``render_story_prompt`` makes from fields of these UTF-8
    lengths, at most (the scheduler reserves spend from it before the prompt is rendered)."""
    return (
        len(_EMPTY.encode("utf-8"))
        + 2 * epic_id_bytes
        + title_bytes
        + max(backlog_title_bytes, len(b"(untitled)"))
        + max(description_bytes, len(b"(none)"))
        + _COUNT_DIGITS
    )


def prompt_tokens_bound(prompt_bytes: int) -> int:
    """Tokens a prompt of ``prompt_bytes`` UTF-8 bytes can take, at most: a byte-level BPE
    token holds at least one byte, plus the chat format's overhead."""
    return prompt_bytes + CHAT_OVERHEAD_TOKENS


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
