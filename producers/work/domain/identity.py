"""Semantic identity of commands (ADR-035 §8) and lock scopes (§9): pure functions.

A thread is idempotent by *what it is about*, never by a UI session: generating the stories of
epic E of backlog B in project P is one identity however many times it is submitted. A child
thread of a generate-all has the identity of the single-epic command for its epic, so at most
one active thread (hence at most one live work item) exists per epic at any time, whichever
command asked for it.
"""

from __future__ import annotations

import re

from producers.work.domain.model import ThreadKind

IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""Project, document and epic ids: printable, no '/' (the identity separator), no spaces."""
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)
_SEPARATOR = "/"


def check_identifier(value: str, what: str) -> str:
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError(f"{what} {value!r} must match {IDENTIFIER_PATTERN}")
    return value


def thread_identity(
    kind: ThreadKind, project_id: str, document_id: str, epic_id: str | None = None
) -> str:
    """The idempotency key of a thread: kind-specific, over the semantic target."""
    parts: tuple[str, ...]
    if kind is ThreadKind.STORY_GENERATE_EPIC:
        if epic_id is None:
            raise ValueError("a single-epic thread needs an epic id")
        parts = ("generate_stories", project_id, document_id, epic_id)
    else:
        parts = ("generate_stories_all", project_id, document_id)
    return _SEPARATOR.join(parts)


def epic_lock_scope(document_id: str, epic_id: str) -> str:
    """The lock scope of mutations of one epic (ADR-035 §6.2 ``epic:{id}``, the id qualified by
    its document). Also the Kafka record key of the item's events: one epic, one partition."""
    return f"epic:{document_id}/{epic_id}"


def project_lock_scope(project_id: str) -> str:
    """The lock scope of orchestration in one project."""
    return f"project:{project_id}"
