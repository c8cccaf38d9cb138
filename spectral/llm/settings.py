"""The LLM gateway's settings section: which synthesizer, the OpenAI-compatible endpoint, the
routes from function keys to models and the providers' limits (``SPECTRAL_SYNTHESIZER``,
``SPECTRAL_LLM_*``). Every feature that pays for model calls reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr

from spectral.settings import PluginSettings

SynthesizerKind = Literal["stub", "openai"]


class LlmSettings(PluginSettings):
    """How spectral reaches a model (spectral/llm)."""

    synthesizer: SynthesizerKind = Field(
        default="stub",
        description="stub = the deterministic StubSynthesizer; openai = llm_base_url "
        "(any OpenAI-compatible chat-completions endpoint).",
    )
    llm_base_url: str | None = Field(
        default=None, description="e.g. https://gateway.example/v1 (POST {url}/chat/completions)."
    )
    llm_api_key: SecretStr | None = Field(default=None, description="Bearer token of the gateway.")
    llm_timeout_seconds: float = Field(default=60.0, gt=0, description="One model call, at most.")
    llm_stream: bool = Field(
        default=False,
        description="Ask the endpoint to stream its answer (server-sent events) and stop reading "
        "at the call's completion bound (max_tokens): a provider that does not stop is cut off "
        "there, and the call is billed no more than its reservation on spectral's side.",
    )
    llm_routes: dict[str, str] = Field(
        default_factory=dict,
        description='function key -> model, JSON: {"story_generate": "m", "org-1/story_generate": '
        '"m2", "*": "default-model"}. No model names in business code.',
    )
    llm_routes_file: Path | None = Field(
        default=None,
        description="A JSON file of routes (same form as llm_routes, which wins), or "
        '{"routes": {...}, "limits": {...}} with the provider limits beside them.',
    )
    llm_limits: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description='model (or "*") -> {concurrency, rpm, tpm, max_tokens, prompt_price, '
        "completion_price, burst_seconds}, JSON (spectral/llm/limits.py); overrides the routes "
        "file's limits model by model.",
    )
