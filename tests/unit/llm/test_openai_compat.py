"""The OpenAI-compatible synthesizer against a fake chat-completions server on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from spectral.db.storable import is_storable
from spectral.errors import ConfigurationError, PermanentError, TransientError
from spectral.llm.openai_compat import OpenAICompatSynthesizer
from spectral.llm.router import ModelRouter
from spectral.llm.seam import (
    CallTimedOutError,
    SynthesisRequest,
    SynthesisResponse,
    Synthesizer,
    UnreadableAnswerError,
)
from spectral.settings import load_settings
from tests.fakes.openai_server import FakeModelServer
from tests.hostile_answers import corpus

KEY = "sk-canary-4Hq9"


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as running:
        yield running


def _client(url: str, timeout: float = 5.0) -> OpenAICompatSynthesizer:
    return OpenAICompatSynthesizer(
        url,
        ModelRouter({"story_generate": "route-model-a", "*": "route-default"}),
        api_key=SecretStr(KEY),
        timeout_seconds=timeout,
    )


def _request(prompt: str, key: str = "item-1:1") -> SynthesisRequest:
    return SynthesisRequest(
        function_key="story_generate", prompt=prompt, input={}, idempotency_key=key
    )


async def test_a_call_sends_model_prompt_key_and_idempotency_key(server: FakeModelServer) -> None:
    client = _client(server.url)
    try:
        response = await client.synthesize(_request("Write stories for epic E-1: x", "w-1:2"))
    finally:
        await client.aclose()
    assert json.loads(response.content)["stories"][0]["story_key"] == "E-1-1"
    assert response.model == "fake-model-1"
    assert response.usage == {"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33}
    (call,) = server.snapshot()
    assert call.idempotency_key == "w-1:2"
    assert call.authorization == f"Bearer {KEY}"
    assert call.body["model"] == "route-model-a"
    assert call.body["messages"] == [{"role": "user", "content": "Write stories for epic E-1: x"}]
    assert KEY not in repr(client)


async def test_server_errors_and_429_are_transient(server: FakeModelServer) -> None:
    client = _client(server.url)
    try:
        with pytest.raises(TransientError, match="503"):
            await client.synthesize(_request("epic E-2: [transient:1]", "w-2:1"))
        ok = await client.synthesize(_request("epic E-2: [transient:1]", "w-2:2"))
    finally:
        await client.aclose()
    assert "stories" in ok.content


async def test_client_errors_and_bad_bodies_are_permanent(server: FakeModelServer) -> None:
    client = _client(server.url)
    try:
        with pytest.raises(PermanentError, match="400"):
            await client.synthesize(_request("epic E-3: [permanent]"))
        invalid = await client.synthesize(_request("epic E-3: [invalid]"))
    finally:
        await client.aclose()
    # Invalid *content* is the validator's business, not the transport's: it comes back as is.
    assert invalid.content == "this is not JSON"


async def test_a_slow_endpoint_times_out_as_transient(server: FakeModelServer) -> None:
    """A timeout is transient, and says it timed out (its outcome is unknown: re-issued under
    the same idempotency key by the executor)."""
    client = _client(server.url, timeout=0.3)
    try:
        with pytest.raises(CallTimedOutError, match="timed out"):
            await client.synthesize(_request("epic E-4: [slow:2]"))
    finally:
        await client.aclose()


async def test_an_unreachable_endpoint_is_transient() -> None:
    client = _client("http://127.0.0.1:9/v1", timeout=1.0)
    try:
        with pytest.raises(TransientError, match="unreachable"):
            await client.synthesize(_request("epic E-5: x"))
    finally:
        await client.aclose()


async def test_settings_build_it_and_refuse_a_missing_url() -> None:
    with pytest.raises(ConfigurationError, match="LLM_BASE_URL"):
        OpenAICompatSynthesizer.from_settings(load_settings(synthesizer="openai"))
    built = OpenAICompatSynthesizer.from_settings(
        load_settings(
            synthesizer="openai", llm_base_url="http://127.0.0.1:1/v1", llm_routes={"*": "m"}
        )
    )
    assert isinstance(built, Synthesizer)
    await built.aclose()


@pytest.mark.parametrize("name", sorted(corpus(3)))
async def test_any_gateway_answer_comes_back_exactly_or_as_a_classified_error(name: str) -> None:
    case = corpus(3)[name]
    outcome: object
    with FakeModelServer(scripts={name: (case.status, case.body)}) as server:
        client = _client(server.url)
        try:
            outcome = await client.synthesize(_request(f"epic E-9: [script:{name}]"))
        except (TransientError, PermanentError) as exc:
            outcome = exc
        finally:
            await client.aclose()
    if isinstance(outcome, UnreadableAnswerError):
        assert case.status == 200  # answered, so paid: the exact bytes come back
        assert outcome.body == case.body
    elif isinstance(outcome, TransientError):
        assert case.status >= 500
    elif isinstance(outcome, PermanentError):
        assert 400 <= case.status < 500
        assert is_storable(str(outcome))  # the body's excerpt is escaped
    else:
        assert isinstance(outcome, SynthesisResponse)
        sent = json.loads(case.body)
        assert outcome.content == sent["choices"][0]["message"]["content"]  # U+0000 and all
        assert outcome.model == sent["model"]
