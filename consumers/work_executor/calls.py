"""What comes back from a paid call: the response payload of whatever the synthesizer returned,
and what a failed call means for its item."""

from __future__ import annotations

import time
from typing import Any

from consumers.work_executor.batch import Failure
from consumers.work_executor.metrics import FailureReason
from consumers.work_executor.retry import FailureKind
from producers.work.domain.payloads import response_payload, unreadable_response_payload
from spectral.errors import PermanentError, TransientError
from spectral.llm.router import RouteError
from spectral.llm.seam import SynthesisResponse


def ms_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def answer_payload(response: Any, duration_ms: int) -> tuple[str | None, dict[str, Any]]:
    """The answer's text and its response payload — whatever the synthesizer handed back (a
    broken one may not even return a ``SynthesisResponse``)."""
    if isinstance(response, SynthesisResponse) and isinstance(response.content, str):
        model = response.model if isinstance(response.model, str) else repr(response.model)
        bound = response.stopped_at_bound
        payload = response_payload(
            content=response.content,
            model=model,
            usage=response.usage,
            duration_ms=duration_ms,
            stopped_at_bound=bound if isinstance(bound, int) else None,
        )
        return response.content, payload
    payload = unreadable_response_payload(
        body=repr(response).encode("utf-8", "backslashreplace"),
        model=str(getattr(response, "model", "")),
        usage=None,
        duration_ms=duration_ms,
    )
    return None, payload


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
