"""The ledger's payloads, typed once: what each entry type records, built and read here only.

The executor writes them (consumers/work_executor), ``history.py`` and the API read them. Every
builder returns a value PostgreSQL can store whatever it was given (``spectral.db.storable``):
a model's answer and the name of the model that gave it are kept losslessly — their exact code
points beside a readable form when they hold U+0000 or a lone surrogate — and diagnostic texts
(error messages, validation errors) are escaped visibly.

Shapes (``?`` = only when it applies)::

    prompt           {function_key, prompt, input, idempotency_key, org_id}
    response         {content, content_base64?, content_encoding?, model, model_base64?,
                      model_encoding?, usage, duration_ms}
                     or, for a paid answer whose body is not a chat completion,
                     {body_base64, body_encoding, body_excerpt, model, usage, duration_ms,
                      unreadable}
    parse_report     {ok, errors, story_count, response_attempt}
    mutation_report  {mutation_id, document_id, epic_id, operation, base_version,
                      result_version, already_applied, story_count, lock_scope}
    error            {kind, reason, message, attempt?, disposition: retry | dead_letter,
                      not_before?, dead_letter_reason?}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, NotRequired, TypedDict

from spectral.db.storable import decode_text, encode_bytes, encode_text, escape_text

MAX_MESSAGE_CHARS: Final = 2000
_USAGE_KEY: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


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
    mutation_id: str
    document_id: str
    epic_id: str
    operation: str
    base_version: int
    result_version: int
    already_applied: bool
    story_count: int
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


def usage_counts(raw: Any) -> dict[str, int]:
    """A gateway's usage object reduced to what the ledger keeps: integer counts under plain
    keys (nested details and odd keys are dropped; they are telemetry, not the answer)."""
    if not isinstance(raw, Mapping):
        return {}
    return {
        key: value
        for key, value in raw.items()
        if isinstance(key, str)
        and _USAGE_KEY.match(key)
        and isinstance(value, int)
        and not isinstance(value, bool)
        and -(2**53) < value < 2**53
    }


def response_payload(*, content: str, model: str, usage: Any, duration_ms: int) -> dict[str, Any]:
    """A paid answer, exactly as received (``response_content`` reads it back)."""
    return {
        **encode_text("content", content),
        **encode_text("model", model),
        "usage": usage_counts(usage),
        "duration_ms": duration_ms,
    }


def unreadable_response_payload(
    *, body: bytes, model: str, usage: Any, duration_ms: int
) -> dict[str, Any]:
    """A paid answer whose body the synthesizer could not read as an answer: its bytes."""
    return {
        **encode_bytes("body", body),
        **encode_text("model", model),
        "usage": usage_counts(usage),
        "duration_ms": duration_ms,
        "unreadable": True,
    }


def response_content(payload: Mapping[str, Any]) -> str | None:
    """The answer's text as the model gave it; None for an unreadable answer."""
    if payload.get("unreadable"):
        return None
    return decode_text(payload, "content")


def response_model(payload: Mapping[str, Any]) -> str | None:
    return decode_text(payload, "model")


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
    epic_id: str,
    operation: str,
    base_version: int,
    result_version: int,
    already_applied: bool,
    story_count: int,
    lock_scope: str,
) -> MutationReportPayload:
    return {
        "mutation_id": mutation_id,
        "document_id": document_id,
        "epic_id": epic_id,
        "operation": operation,
        "base_version": base_version,
        "result_version": result_version,
        "already_applied": already_applied,
        "story_count": story_count,
        "lock_scope": lock_scope,
    }


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
