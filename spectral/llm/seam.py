"""THE SEAM. Every paid model call in spectral goes through ``Synthesizer``.

Business code asks for a *function key* (e.g. ``"rule_stub"``, ``"story_generate"``) and never
names a model: a router resolves the key (and an optional org) to a model from configuration.
The default implementation is a deterministic stub; a real implementation talks to any
OpenAI-compatible chat-completions endpoint. Do not change this protocol without changing every
implementation and the golden files that lock the stub's output shape.

Errors: implementations raise ``spectral.errors.TransientError`` for failures worth retrying
(timeouts, 5xx, 429, connection refused) and ``spectral.errors.PermanentError`` for the rest
(4xx other than 429). When the provider *answered* that it did not do the call (a status, not a
dropped connection), the error says so — ``CallRefusedError`` (transient: 408, 409, 425, 5xx),
``RateLimitedError`` (429, with the ``Retry-After`` it asked for) or ``RequestRejectedError``
(permanent: other 4xx): nothing was charged, so spend reserved for the call is released; after
a timeout or a dropped connection the outcome is unknown and the reservation stays counted.

An answer that was delivered — and so paid for — but is not what the protocol promises (a
body that is not a chat completion) raises ``UnreadableAnswerError``, which carries the body's
bytes: callers record them as the paid answer before anything else.

``SynthesisResponse.content`` is any ``str`` the provider sent, U+0000 and lone surrogates
included: callers that store it must use a lossless form (``spectral.db.storable``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from spectral.errors import PermanentError, TransientError


@dataclass(frozen=True)
class SynthesisRequest:
    """What to synthesize. ``idempotency_key`` is passed to gateways that accept one, so a
    retried call for the same attempt is not paid twice where the provider supports it."""

    function_key: str
    prompt: str
    input: Mapping[str, Any]
    idempotency_key: str
    org_id: str | None = None
    max_tokens: int | None = None
    """The completion cap to send (the provider limits of the model route), if any."""


@dataclass(frozen=True)
class SynthesisResponse:
    """What came back, exactly as received (``content``), plus who answered and the usage."""

    content: str
    model: str
    usage: Mapping[str, int] = field(default_factory=dict)
    stopped_at_bound: int | None = None
    """A streamed answer cut at the completion bound: the ``max_tokens`` it was stopped at
    (the content is what had come in by then; the caller bills no more than the bound)."""


class UnreadableAnswerError(PermanentError):
    """The provider answered (and charged) with a body that is not an answer: ``body`` holds
    its bytes exactly as received, ``model`` the model asked for, ``usage`` whatever usage the
    body reported."""

    def __init__(
        self, message: str, *, body: bytes, model: str, usage: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.body = body
        self.model = model
        self.usage: Mapping[str, Any] = usage or {}


class CallRefusedError(TransientError):
    """The provider answered with a status saying it did not do the call (408, 409, 425,
    5xx): worth retrying, and nothing was charged."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class RateLimitedError(CallRefusedError):
    """429: the provider has no capacity for the call now. ``retry_after`` is how long it
    asked callers to wait (seconds; None when it did not say). Not charged, and waiting for
    capacity is not an attempt."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, status=429)
        self.retry_after = retry_after


class CallTimedOutError(TransientError):
    """The call took longer than its timeout: the request left, and no answer came back in
    time. Its outcome is unknown (the provider may be doing it, and bill it): a retry under the
    same idempotency key lets a gateway that honours keys answer it without billing again."""


class RequestRejectedError(PermanentError):
    """The provider refused the request itself (4xx other than 408, 409, 425, 429): retrying
    cannot help, and nothing was charged."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


@runtime_checkable
class Synthesizer(Protocol):
    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse: ...
