"""The ledger's payloads, typed once: what each entry type records, built and read here only.

The executor writes them (consumers/work_executor), ``history.py`` and the API read them. Every
builder returns a value PostgreSQL can store whatever it was given (``spectral.db.storable``):
a model's answer and the name of the model that gave it are kept losslessly — their exact code
points beside a readable form when they hold U+0000 or a lone surrogate
(``spectral.llm.answers``, shared with the rule-stub worker) — and diagnostic texts (error
messages, validation errors) are escaped visibly.

Shapes (``?`` = only when it applies)::

    prompt           {function_key, prompt, input, idempotency_key, org_id}
    response         {content, content_base64?, content_encoding?, model, model_base64?,
                      model_encoding?, usage, duration_ms}
                     or, for a paid answer whose body is not a chat completion,
                     {body_base64, body_encoding, body_excerpt, model, usage, duration_ms,
                      unreadable}
    parse_report     {ok, errors, response_attempt, ...the work function's own fields}
                     (story generation: story_count; the rule stub: stub_chars)
    mutation_report  {mutation_id, document_id, operation, base_version, result_version,
                      already_applied, lock_scope, ...the mutation's own fields}
                     (replace_epic_stories: epic_id, story_count; set_rule_stub: stub_chars)
    error            {kind, reason, message, attempt?, disposition: retry | dead_letter,
                      not_before?, dead_letter_reason?}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NotRequired, TypedDict

from spectral.db.storable import escape_text
from spectral.llm.answers import (
    response_content,
    response_model,
    response_payload,
    unreadable_response_payload,
    usage_counts,
)

MAX_MESSAGE_CHARS: Final = 2000

__all__ = [
    "ErrorPayload",
    "MutationReportPayload",
    "ParseReportPayload",
    "PromptPayload",
    "error_payload",
    "message_text",
    "mutation_report_payload",
    "parse_report_payload",
    "prompt_payload",
    "response_content",
    "response_model",
    "response_payload",
    "unreadable_response_payload",
    "usage_counts",
]


class PromptPayload(TypedDict):
    function_key: str
    prompt: str
    input: dict[str, Any]
    idempotency_key: str
    org_id: str | None


class ParseReportPayload(TypedDict):
    ok: bool
    errors: list[str]
    story_count: int
    response_attempt: int


class MutationReportPayload(TypedDict):
    """The fields every mutation report has (its mutation adds its own: ``report()``)."""

    mutation_id: str
    document_id: str
    operation: str
    base_version: int
    result_version: int
    already_applied: bool
    lock_scope: str


class ErrorPayload(TypedDict):
    kind: str
    reason: str
    message: str
    disposition: str
    attempt: NotRequired[int]
    not_before: NotRequired[str]
    dead_letter_reason: NotRequired[str]


def prompt_payload(
    *,
    function_key: str,
    prompt: str,
    input_: Mapping[str, Any],
    idempotency_key: str,
    org_id: str | None,
) -> PromptPayload:
    return {
        "function_key": function_key,
        "prompt": prompt,
        "input": dict(input_),
        "idempotency_key": idempotency_key,
        "org_id": org_id,
    }


def parse_report_payload(
    *, ok: bool, errors: list[str], story_count: int, response_attempt: int
) -> ParseReportPayload:
    return {
        "ok": ok,
        "errors": [message_text(e, 500) for e in errors],
        "story_count": story_count,
        "response_attempt": response_attempt,
    }


def mutation_report_payload(
    *,
    mutation_id: str,
    document_id: str,
    operation: str,
    base_version: int,
    result_version: int,
    already_applied: bool,
    lock_scope: str,
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report of one applied mutation; ``details``: the mutation's own fields."""
    common: MutationReportPayload = {
        "mutation_id": mutation_id,
        "document_id": document_id,
        "operation": operation,
        "base_version": base_version,
        "result_version": result_version,
        "already_applied": already_applied,
        "lock_scope": lock_scope,
    }
    return {**(details or {}), **common}


def error_payload(
    *,
    kind: str,
    reason: str,
    message: str,
    disposition: str,
    attempt: int | None = None,
    dead_letter_reason: str | None = None,
) -> ErrorPayload:
    payload: ErrorPayload = {
        "kind": kind,
        "reason": reason,
        "message": message_text(message),
        "disposition": disposition,
    }
    if attempt is not None:
        payload["attempt"] = attempt
    if dead_letter_reason is not None:
        payload["dead_letter_reason"] = dead_letter_reason
    return payload


def message_text(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A diagnostic text as the ledger and the item row keep it: storable, at most ``limit``
    characters."""
    return escape_text(message[:limit])
