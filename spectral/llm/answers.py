"""A paid answer as it is stored: exactly what the provider sent, in a form PostgreSQL takes.

Whoever pays for a model call (the work executor's ledger, the rule-stub leases) stores the
answer with ``response_payload``: the content and the model name are kept losslessly — when
they hold U+0000 or a lone surrogate, beside their readable escaped form come their exact code
points (``spectral.db.storable.encode_text``) — and ``response_content`` gives the original text
back. An answer the synthesizer could not read (``UnreadableAnswerError``) keeps its bytes.
Usage is reduced to integer counts under plain keys: it is telemetry, not the answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from spectral.db.storable import decode_text, encode_bytes, encode_text

_USAGE_KEY: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SAFE_INTEGER: Final = 2**53


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
        and -_SAFE_INTEGER < value < _SAFE_INTEGER
    }


def response_payload(
    *,
    content: str,
    model: str,
    usage: Any,
    duration_ms: int,
    stopped_at_bound: int | None = None,
) -> dict[str, Any]:
    """A paid answer, exactly as received (``response_content`` reads it back);
    ``stopped_at_bound``: a streamed answer whose reading stopped at that completion bound."""
    payload = {
        **encode_text("content", content),
        **encode_text("model", model),
        "usage": usage_counts(usage),
        "duration_ms": duration_ms,
    }
    if stopped_at_bound is not None:
        payload["stopped_at_bound"] = stopped_at_bound
    return payload


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
