"""Every synthesizer passes the seam's contract suite: the deterministic stub, and the
OpenAI-compatible client against a fake chat-completions server on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from spectral.llm.openai_compat import OpenAICompatSynthesizer
from spectral.llm.router import ModelRouter
from spectral.llm.seam import Synthesizer
from spectral.llm.stub import StubSynthesizer
from tests.fakes.openai_server import FakeModelServer
from tests.seams.synthesizer import SynthesizerContract


class TestStubSynthesizer(SynthesizerContract):
    @pytest.fixture
    def synthesizer(self) -> Synthesizer:
        return StubSynthesizer(clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))


class TestOpenAICompatSynthesizer(SynthesizerContract):
    @pytest.fixture
    def server(self) -> Iterator[FakeModelServer]:
        with FakeModelServer() as running:
            yield running

    @pytest.fixture
    async def synthesizer(self, server: FakeModelServer) -> AsyncIterator[Synthesizer]:
        client = OpenAICompatSynthesizer(
            server.url,
            ModelRouter({"*": "route-default"}),
            api_key=SecretStr("sk-contract"),
            timeout_seconds=10.0,
        )
        try:
            yield client
        finally:
            await client.aclose()
