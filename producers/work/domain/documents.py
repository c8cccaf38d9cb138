"""Canonical stored documents and the explicit mutations that alone may change them (ADR-035
§5.4). Pure: schema, validation and the application of a mutation to a content value; the
executor's repository stores the result under the target lock.

A ``story_backlog`` document::

    {"title": "...", "epics": {"E-1": {"title": "...", "description": "...",
                                       "stories": [{"story_key", "title", "description",
                                                    "acceptance_criteria": [...]}, ...]}}}

The one mutation today, ``replace_epic_stories``, sets the stories of one epic. It is idempotent
(applying it twice gives the same content) and carries a mutation id derived from its work item,
so a retried application is recognised and skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from producers.work.domain.identity import IDENTIFIER_PATTERN
from spectral.db.storable import is_storable
from spectral.errors import PermanentError

STORY_BACKLOG: Final = "story_backlog"
REPLACE_EPIC_STORIES: Final = "replace_epic_stories"
MAX_STORIES_PER_EPIC: Final = 50
_MUTATION_NAMESPACE: Final = uuid.UUID("6f1d2c3e-35a0-4c59-9f0e-5a3b3c0d0035")


def _storable(value: str) -> str:
    """Document text is stored as jsonb: U+0000 and lone surrogates cannot be (refused here,
    where the content is validated, instead of failing the document's write)."""
    if not is_storable(value):
        raise ValueError("text must not contain U+0000 or a lone surrogate (not storable)")
    return value


Text = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=500),
    AfterValidator(_storable),
]
LongText = Annotated[str, StringConstraints(max_length=5000), AfterValidator(_storable)]
EpicId = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN)]


class InvalidDocumentError(PermanentError):
    """Content that does not satisfy its document schema."""


@dataclass(frozen=True)
class StoredDocument:
    """A document at the version it was read at."""

    document_id: str
    version: int
    content: Mapping[str, Any]
    doc_type: str = STORY_BACKLOG


class Story(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    story_key: Text
    title: Text
    description: LongText = ""
    acceptance_criteria: tuple[Text, ...] = Field(default=(), max_length=50)


class Epic(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    title: Text
    description: LongText = ""
    stories: tuple[Story, ...] = Field(default=(), max_length=MAX_STORIES_PER_EPIC)


class StoryBacklog(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    title: LongText = ""
    epics: dict[EpicId, Epic] = Field(default_factory=dict)


def validate_backlog(content: Mapping[str, Any]) -> StoryBacklog:
    """The content as a ``StoryBacklog``; ``InvalidDocumentError`` says what is wrong."""
    try:
        return StoryBacklog.model_validate(dict(content))
    except ValidationError as exc:
        raise InvalidDocumentError(f"invalid {STORY_BACKLOG}: {_errors(exc)}") from exc


def _errors(exc: ValidationError, where: tuple[str, ...] = ()) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in (*where, *error['loc']))}: {error['msg']}"
        for error in exc.errors()[:5]
    )


@dataclass(frozen=True)
class ReplaceEpicStories:
    """Set the stories of one epic of a story backlog."""

    mutation_id: uuid.UUID
    document_id: str
    epic_id: str
    stories: tuple[Story, ...]

    operation: str = REPLACE_EPIC_STORIES

    @classmethod
    def for_item(
        cls, work_item_id: uuid.UUID, document_id: str, epic_id: str, stories: tuple[Story, ...]
    ) -> ReplaceEpicStories:
        """The mutation of one work item; its id is derived from the item (idempotency)."""
        mutation_id = uuid.uuid5(_MUTATION_NAMESPACE, f"{work_item_id}:{REPLACE_EPIC_STORIES}")
        return cls(mutation_id, document_id, epic_id, stories)

    def arguments(self) -> dict[str, Any]:
        return {
            "epic_id": self.epic_id,
            "stories": [story.model_dump(mode="json") for story in self.stories],
        }

    def report(self) -> dict[str, Any]:
        """Its fields of the ``mutation_report`` entry."""
        return {"epic_id": self.epic_id, "story_count": len(self.stories)}


def apply_mutation(content: Mapping[str, Any], mutation: ReplaceEpicStories) -> dict[str, Any]:
    """The new content after ``mutation``, validated against the schema (pure)."""
    (result,) = apply_in_turn(content, [mutation])
    if isinstance(result, InvalidDocumentError):
        raise result
    return result


def apply_in_turn(
    content: Mapping[str, Any], mutations: Sequence[ReplaceEpicStories]
) -> list[dict[str, Any] | InvalidDocumentError]:
    """Apply ``mutations`` one after the other, each to the content the previous accepted one
    left (pure). Per mutation: the new content (the schema's JSON form), or the error that
    refused it (the content then stays as it was for the next).

    The document is validated once; each mutation then validates only the epic it replaces
    (the rest of the content is unchanged and valid), so a chain costs one validation of the
    document plus one of an epic per mutation — the same results as validating the whole new
    content every time."""
    try:
        current = validate_backlog(content).model_dump(mode="json")
    except InvalidDocumentError as exc:
        return [exc for _ in mutations]
    results: list[dict[str, Any] | InvalidDocumentError] = []
    for mutation in mutations:
        try:
            current = _replace_stories(current, mutation)
        except InvalidDocumentError as exc:
            results.append(exc)
            continue
        results.append(current)
    return results


def _replace_stories(content: dict[str, Any], mutation: ReplaceEpicStories) -> dict[str, Any]:
    """``content`` (valid, in JSON form) with the epic's stories replaced; only the new epic is
    validated."""
    epics: dict[str, Any] = content["epics"]
    epic = epics.get(mutation.epic_id)
    if epic is None:
        raise InvalidDocumentError(
            f"document {mutation.document_id!r} has no epic {mutation.epic_id!r}"
        )
    try:
        updated = Epic.model_validate({**epic, "stories": mutation.stories})
    except ValidationError as exc:
        where = ("epics", mutation.epic_id)
        raise InvalidDocumentError(f"invalid {STORY_BACKLOG}: {_errors(exc, where)}") from exc
    return {**content, "epics": {**epics, mutation.epic_id: updated.model_dump(mode="json")}}
