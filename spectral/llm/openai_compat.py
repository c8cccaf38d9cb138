"""A ``Synthesizer`` for any OpenAI-compatible chat-completions endpoint (httpx).

``POST {llm_base_url}/chat/completions`` with the model the router resolves for the request's
function key, the prompt as the user message, temperature 0, and two headers: ``Authorization:
Bearer <llm_api_key>`` (when a key is set) and ``Idempotency-Key: <request.idempotency_key>`` —
gateways that honour it answer a repeated key from their cache instead of charging again. The
executor sends one key per attempt (``work_item_id:attempt``) and sends a call twice only under
its own key, when its outcome is unknown (its worker died mid-call: a re-issue).

The prompt must carry everything the model needs: ``request.input`` is context for routing,
the stub and the ledger, and is not sent.

Errors: a timeout, a connection failure, 408, 409, 425, 429 and 5xx are ``TransientError``
(worth retrying; a timeout is a ``CallTimedOutError``, an answered status a
``CallRefusedError``, 429 a ``RateLimitedError`` carrying the ``Retry-After`` the gateway
sent, in seconds or as an HTTP date); other 4xx are
``RequestRejectedError``, a ``PermanentError`` (their body's excerpt, escaped so it can be
stored, is in the message). ``max_tokens`` is sent when the request carries one (the model
route's limit: it makes the spend reserved for the call an upper bound).

With ``stream=True`` (``SPECTRAL_LLM_STREAM``) the call asks for a stream of server-sent events
(``stream_options.include_usage``) and reads it with ``streams.StreamReader`` up to the call's
completion bound: reading stops at ``max_tokens`` and the connection is closed, whatever the
provider goes on sending; the answer then carries ``stopped_at_bound`` and no usage. A gateway
that answers a stream request in one piece is read as usual.

A 2xx answer was paid for: a body that is not JSON (or nested too deeply to read), or has no
text ``choices[0].message.content``, raises ``UnreadableAnswerError`` carrying the body's
bytes. The content itself comes back exactly as sent (U+0000 and lone
surrogates included); so does the model name when it is text. The API key never appears in an
error, a log line or a repr.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpx
from pydantic import SecretStr

from spectral.db.storable import escape_text
from spectral.errors import ConfigurationError, TransientError
from spectral.llm.router import ModelRouter
from spectral.llm.seam import (
    CallRefusedError,
    CallTimedOutError,
    RateLimitedError,
    RequestRejectedError,
    SynthesisRequest,
    SynthesisResponse,
    UnreadableAnswerError,
)
from spectral.llm.settings import LlmSettings
from spectral.llm.streams import StreamError, StreamReader
from spectral.settings import Settings

_RETRYABLE_STATUS: Final = frozenset({408, 409, 425, 429})
_SERVER_ERROR: Final = 500
_CLIENT_ERROR: Final = 400
_TOO_MANY_REQUESTS: Final = 429
MAX_RETRY_AFTER_SECONDS: Final = 3600.0


class OpenAICompatSynthesizer:
    """Chat-completions client; one ``httpx.AsyncClient`` per instance (close with ``aclose``)."""

    def __init__(
        self,
        base_url: str,
        router: ModelRouter,
        *,
        api_key: SecretStr | None = None,
        timeout_seconds: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
        stream: bool = False,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigurationError("llm_base_url must be an http(s) URL")
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._router = router
        self._api_key = api_key
        self._timeout = timeout_seconds
        self._stream = stream
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_seconds), transport=transport, follow_redirects=False
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAICompatSynthesizer:
        llm = LlmSettings.of(settings)
        if not llm.llm_base_url:
            raise ConfigurationError(
                "SPECTRAL_SYNTHESIZER=openai needs SPECTRAL_LLM_BASE_URL (an OpenAI-compatible "
                "endpoint, e.g. https://gateway.example/v1)"
            )
        return cls(
            llm.llm_base_url,
            ModelRouter.from_settings(settings),
            api_key=llm.llm_api_key,
            timeout_seconds=llm.llm_timeout_seconds,
            stream=llm.llm_stream,
        )

    def __repr__(self) -> str:
        return f"OpenAICompatSynthesizer(url={self._url!r})"

    async def aclose(self) -> None:
        await self._client.aclose()

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        resolved = self._router.resolve(request.function_key, request.org_id)
        headers = {"Idempotency-Key": request.idempotency_key}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        body: dict[str, Any] = {
            "model": resolved.model,
            "messages": [{"role": "user", "content": request.prompt}],
            "temperature": 0,
        }
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        headers["Content-Type"] = "application/json"
        if self._stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        try:
            async with asyncio.timeout(self._timeout):  # the whole call, not each phase
                if self._stream:
                    return await self._streamed(body, headers, resolved.model, request.max_tokens)
                response = await self._client.post(self._url, content=_json(body), headers=headers)
        except (httpx.TimeoutException, TimeoutError) as exc:
            raise CallTimedOutError(f"model call timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise TransientError(f"model endpoint unreachable ({type(exc).__name__})") from exc
        _refused(response)
        return _parse(response, resolved.model)

    async def _streamed(
        self, body: Mapping[str, Any], headers: Mapping[str, str], model: str, bound: int | None
    ) -> SynthesisResponse:
        """A streamed answer, read up to its completion bound (streams.py): reading stops there
        and the connection is closed, whatever the provider goes on sending."""
        request = self._client.build_request(
            "POST", self._url, content=_json(body), headers=headers
        )
        response = await self._client.send(request, stream=True)
        try:
            if response.status_code >= _CLIENT_ERROR or not response.headers.get(
                "content-type", ""
            ).startswith("text/event-stream"):
                await response.aread()  # an error, or a gateway that answered in one piece
                _refused(response)
                return _parse(response, model)
            reader = StreamReader(bound, model)
            try:
                async for data in response.aiter_bytes():
                    if reader.feed(data):
                        break
            except StreamError as exc:
                raise UnreadableAnswerError(
                    f"model endpoint streamed {exc}", body=bytes(reader.raw), model=model
                ) from exc
            return reader.response()
        finally:
            await response.aclose()


def _refused(response: httpx.Response) -> None:
    """Raise what an answered status that is not a 2xx means."""
    status = response.status_code
    if status == _TOO_MANY_REQUESTS:
        wait = retry_after(response.headers.get("retry-after"))
        raise RateLimitedError(
            "model endpoint answered 429 (rate limited"
            + (f", retry after {wait:g} s)" if wait is not None else ")"),
            retry_after=wait,
        )
    if status in _RETRYABLE_STATUS or status >= _SERVER_ERROR:
        raise CallRefusedError(f"model endpoint answered {status}", status=status)
    if status >= _CLIENT_ERROR:
        raise RequestRejectedError(
            f"model endpoint refused the call: {status} {_excerpt(response)}", status=status
        )


def _json(body: Mapping[str, Any]) -> bytes:
    """The request body: UTF-8 JSON, or, when the prompt holds a lone surrogate (any ``str`` is
    a prompt, and UTF-8 cannot carry one), with non-ASCII characters escaped as JSON allows."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()


def retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), within
    [0, 3600]; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(int(text[:10])), MAX_RETRY_AFTER_SECONDS)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _excerpt(response: httpx.Response) -> str:
    return escape_text(response.text[:300].replace("\n", " "))


def _parse(response: httpx.Response, requested_model: str) -> SynthesisResponse:
    def unreadable(why: str, usage: Any = None) -> UnreadableAnswerError:
        return UnreadableAnswerError(
            f"model endpoint answered {response.status_code} with {why}",
            body=response.content,
            model=requested_model,
            usage=usage if isinstance(usage, dict) else None,
        )

    try:
        data = json.loads(response.content)
    except (ValueError, RecursionError) as exc:
        raise unreadable(f"a body that is not JSON ({type(exc).__name__})") from exc
    if not isinstance(data, dict):
        raise unreadable("a JSON body that is not an object")
    usage = data.get("usage")
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise unreadable("no choices[0].message.content", usage) from exc
    if not isinstance(content, str):
        raise unreadable("a content that is not text", usage)
    model = data.get("model") if isinstance(data.get("model"), str) else requested_model
    raw_usage = usage if isinstance(usage, dict) else {}
    usage_counts = {
        key: value
        for key, value in raw_usage.items()
        if isinstance(key, str) and isinstance(value, int) and not isinstance(value, bool)
    }
    return SynthesisResponse(content=content, model=str(model), usage=usage_counts)
