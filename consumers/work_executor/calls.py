"""What a paid call is built from and what comes back: the request of an attempt, the response
payload of whatever the synthesizer returned, and what a failed call means for its item."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from consumers.work_executor.batch import Failure
from consumers.work_executor.metrics import FailureReason
from consumers.work_executor.prompts import render_story_prompt
from consumers.work_executor.repository import LoadedItem, StoredDocument
from consumers.work_executor.retry import FailureKind
from producers.work.domain.documents import InvalidDocumentError, StoryBacklog, validate_backlog
from producers.work.domain.payloads import response_payload, unreadable_response_payload
from spectral.errors import PermanentError, TransientError
from spectral.llm.router import RouteError
from spectral.llm.seam import SynthesisRequest, SynthesisResponse


class PermanentItemError(PermanentError):
    """The item cannot be executed as asked (missing document or epic): no paid call."""


def ms_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def answer_payload(response: Any, duration_ms: int) -> tuple[str | None, dict[str, Any]]:
    """The answer's text and its response payload — whatever the synthesizer handed back (a
    broken one may not even return a ``SynthesisResponse``)."""
    if isinstance(response, SynthesisResponse) and isinstance(response.content, str):
        model = response.model if isinstance(response.model, str) else repr(response.model)
        payload = response_payload(
            content=response.content, model=model, usage=response.usage, duration_ms=duration_ms
        )
        return response.content, payload
    payload = unreadable_response_payload(
        body=repr(response).encode("utf-8", "backslashreplace"),
        model=str(getattr(response, "model", "")),
        usage=None,
        duration_ms=duration_ms,
    )
    return None, payload


def request_for(
    loaded: LoadedItem,
    attempt: int,
    documents: Mapping[str, StoredDocument],
    backlogs: dict[str, StoryBacklog | InvalidDocumentError],
    *,
    max_tokens: int | None = None,
) -> SynthesisRequest:
    """The paid call of ``attempt``; ``backlogs`` caches each document's validation for the
    batch; ``max_tokens`` the completion cap of the item's model route."""
    item = loaded.item
    document_id = str(item.input.get("document_id", ""))
    epic_id = str(item.input.get("epic_id", ""))
    document = documents.get(document_id)
    if document is None:
        raise PermanentItemError(f"document {document_id!r} does not exist")
    backlog = backlogs.get(document_id)
    if backlog is None:
        try:
            backlog = validate_backlog(document.content)
        except InvalidDocumentError as exc:
            backlog = exc
        backlogs[document_id] = backlog
    if isinstance(backlog, InvalidDocumentError):
        raise PermanentItemError(str(backlog))
    epic = backlog.epics.get(epic_id)
    if epic is None:
        raise PermanentItemError(f"document {document_id!r} has no epic {epic_id!r}")
    prompt, data = render_story_prompt(epic_id=epic_id, epic=epic, backlog_title=backlog.title)
    org = item.input.get("org_id")
    return SynthesisRequest(
        function_key=item.function_key,
        prompt=prompt,
        input={**data, "document_id": document_id},
        idempotency_key=f"{item.work_item_id}:{attempt}",
        org_id=str(org) if org else None,
        max_tokens=max_tokens,
    )


def classify_call_failure(exc: Exception) -> Failure:
    """What a failed synthesizer call means for the item: a route that cannot resolve and a
    refusal are permanent, a transient fault is retried, anything unexpected is retried within
    the attempt limit."""
    if isinstance(exc, RouteError):
        return FailureKind.PERMANENT, FailureReason.ROUTER_RESOLVE, str(exc)
    if isinstance(exc, PermanentError):
        return FailureKind.PERMANENT, FailureReason.SYNTHESIZER, str(exc)
    if isinstance(exc, TransientError):
        return FailureKind.TRANSIENT, FailureReason.SYNTHESIZER, str(exc)
    if isinstance(exc, TimeoutError):
        return FailureKind.TRANSIENT, FailureReason.SYNTHESIZER, "the call took too long"
    return FailureKind.TRANSIENT, FailureReason.UNKNOWN, f"{type(exc).__name__}: {exc}"
