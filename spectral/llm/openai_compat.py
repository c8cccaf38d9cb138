"""A ``Synthesizer`` for any OpenAI-compatible chat-completions endpoint (httpx).

``POST {llm_base_url}/chat/completions`` with the model the router resolves for the request's
function key, the prompt as the user message, temperature 0, and two headers: ``Authorization:
Bearer <llm_api_key>`` (when a key is set) and ``Idempotency-Key: <request.idempotency_key>`` —
gateways that honour it answer a repeated key from their cache instead of charging again. The
executor sends one key per attempt (``work_item_id:attempt``) and never calls twice per attempt.

The prompt must carry everything the model needs: ``request.input`` is context for routing,
the stub and the ledger, and is not sent.

Errors: a timeout, a connection failure, 408, 409, 425, 429 and 5xx are ``TransientError``
(worth retrying); other 4xx, a non-JSON body or a body without ``choices[0].message.content``
are ``PermanentError``. The API key never appears in an error, a log line or a repr.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import httpx
from pydantic import SecretStr

from spectral.errors import ConfigurationError, PermanentError, TransientError
from spectral.llm.router import ModelRouter
from spectral.llm.seam import SynthesisRequest, SynthesisResponse
from spectral.settings import Settings

_RETRYABLE_STATUS: Final = frozenset({408, 409, 425, 429})
_SERVER_ERROR: Final = 500
_CLIENT_ERROR: Final = 400


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
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigurationError("llm_base_url must be an http(s) URL")
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._router = router
        self._api_key = api_key
        self._timeout = timeout_seconds
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_seconds), transport=transport, follow_redirects=False
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAICompatSynthesizer:
        if not settings.llm_base_url:
            raise ConfigurationError(
                "SPECTRAL_SYNTHESIZER=openai needs SPECTRAL_LLM_BASE_URL (an OpenAI-compatible "
                "endpoint, e.g. https://gateway.example/v1)"
            )
        return cls(
            settings.llm_base_url,
            ModelRouter.from_settings(settings),
            api_key=settings.llm_api_key,
            timeout_seconds=settings.llm_timeout_seconds,
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
        try:
            async with asyncio.timeout(self._timeout):  # the whole call, not each phase
                response = await self._client.post(self._url, json=body, headers=headers)
        except (httpx.TimeoutException, TimeoutError) as exc:
            raise TransientError(f"model call timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise TransientError(f"model endpoint unreachable ({type(exc).__name__})") from exc
        status = response.status_code
        if status in _RETRYABLE_STATUS or status >= _SERVER_ERROR:
            raise TransientError(f"model endpoint answered {status}")
        if status >= _CLIENT_ERROR:
            raise PermanentError(f"model endpoint refused the call: {status} {_excerpt(response)}")
        return _parse(response, resolved.model)


def _excerpt(response: httpx.Response) -> str:
    return response.text[:300].replace("\n", " ")


def _parse(response: httpx.Response, requested_model: str) -> SynthesisResponse:
    try:
        data = response.json()
    except ValueError as exc:
        raise PermanentError(f"model endpoint answered non-JSON: {_excerpt(response)}") from exc
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise PermanentError("model response has no choices[0].message.content") from exc
    if not isinstance(content, str):
        raise PermanentError("model response content is not text")
    model = data.get("model") if isinstance(data.get("model"), str) else requested_model
    raw_usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    usage = {
        key: value
        for key, value in raw_usage.items()
        if isinstance(key, str) and isinstance(value, int) and not isinstance(value, bool)
    }
    return SynthesisResponse(content=content, model=str(model), usage=usage)
