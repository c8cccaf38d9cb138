"""``story_generate``: the stories of one epic of a story backlog, as a work function
(producers/work/domain/functions.py).

An item's input names its backlog and epic (``document_id``, ``epic_id``). The prompt is
rendered from the document when the attempt starts (prompts.py); an answer is valid when it is
1..50 stories of the document schema (validation.py) and becomes ``replace_epic_stories`` of
that epic (documents.py), applied under the epic's lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from producers.work.domain.documents import (
    STORY_BACKLOG,
    InvalidDocumentError,
    ReplaceEpicStories,
    StoredDocument,
    apply_in_turn,
    validate_backlog,
)
from producers.work.domain.functions import Ask, Conclusion, ItemRefusedError, Mutation
from producers.work.domain.model import STORY_FUNCTION_KEY, WorkItem
from producers.work.domain.story.prompts import (
    prompt_bytes_bound,
    render_story_prompt,
)
from producers.work.domain.story.validation import parse_report


class StoryGeneration:
    """The stories of one epic (see the module docstring)."""

    key: Final = STORY_FUNCTION_KEY
    doc_type: Final = STORY_BACKLOG

    def ask(self, item: WorkItem, documents: Mapping[str, StoredDocument]) -> Ask:
        document_id = str(item.input.get("document_id", ""))
        epic_id = str(item.input.get("epic_id", ""))
        document = documents.get(document_id)
        if document is None:
            raise ItemRefusedError(f"document {document_id!r} does not exist")
        try:
            backlog = validate_backlog(document.content)
        except InvalidDocumentError as exc:
            raise ItemRefusedError(str(exc)) from None
        epic = backlog.epics.get(epic_id)
        if epic is None:
            raise ItemRefusedError(f"document {document_id!r} has no epic {epic_id!r}")
        prompt, data = render_story_prompt(epic_id=epic_id, epic=epic, backlog_title=backlog.title)
        return Ask(prompt, {**data, "document_id": document_id})

    def conclude(self, item: WorkItem, content: str, attempt: int) -> Conclusion:
        report = parse_report(content)
        payload = report.payload(attempt)
        if not report.ok:
            return Conclusion(payload, errors=report.errors)
        mutation = ReplaceEpicStories.for_item(
            item.work_item_id,
            str(item.input["document_id"]),
            str(item.input["epic_id"]),
            report.stories,
        )
        return Conclusion(payload, mutation)

    def apply(
        self, content: Mapping[str, Any], mutations: Sequence[Mutation]
    ) -> list[dict[str, Any] | InvalidDocumentError]:
        stories = [m for m in mutations if isinstance(m, ReplaceEpicStories)]
        if len(stories) != len(mutations):
            refused = InvalidDocumentError(f"a {STORY_BACKLOG} only takes replace_epic_stories")
            return [refused for _ in mutations]
        return list(apply_in_turn(content, stories))


def prompt_bytes(content: Mapping[str, Any], epic_id: str) -> int:
    """An upper bound of the UTF-8 length of the prompt of ``epic_id`` of a backlog of this
    (valid) content, whatever stories the epic has by then: the spend reserved for its call
    is computed from it when the item is enqueued (its document's epics and titles never
    change; only the stories do, and their count is bounded in the bound)."""
    epic = content["epics"][epic_id]

    def utf8(value: Any) -> int:
        return len(str(value or "").encode("utf-8"))

    return prompt_bytes_bound(
        epic_id_bytes=utf8(epic_id),
        title_bytes=utf8(epic.get("title")),
        backlog_title_bytes=utf8(content.get("title")),
        description_bytes=utf8(epic.get("description")),
    )


FUNCTION: Final = StoryGeneration()
