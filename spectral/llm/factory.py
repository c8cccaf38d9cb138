"""The synthesizer the settings ask for (``SPECTRAL_SYNTHESIZER``): the deterministic stub by
default, or the OpenAI-compatible client. Callers depend on the protocol only."""

from __future__ import annotations

from spectral.llm.openai_compat import OpenAICompatSynthesizer
from spectral.llm.seam import Synthesizer
from spectral.llm.settings import LlmSettings
from spectral.llm.stub import StubSynthesizer
from spectral.settings import Settings


def build_synthesizer(settings: Settings) -> Synthesizer:
    if LlmSettings.of(settings).synthesizer == "openai":
        return OpenAICompatSynthesizer.from_settings(settings)
    return StubSynthesizer()
