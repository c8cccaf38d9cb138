"""The synthesizer contract (spectral.llm.seam.Synthesizer): every request is answered with a
response (content as received, the model that answered, integer usage) or refused with an error
of spectral's hierarchy — whatever the prompt holds — and concurrent calls each get their own
answer. A concrete suite subclasses :class:`SynthesizerContract` and provides the
``synthesizer`` fixture."""

from __future__ import annotations

import asyncio

import pytest

from spectral.errors import SpectralError
from spectral.llm.seam import SynthesisRequest, SynthesisResponse, Synthesizer

HOSTILE_PROMPTS = (
    "",
    "\x00 a NUL",
    "a lone surrogate \ud800",
    "emoji 🧪 and right-to-left \u202e text",
    '{"stories": "not what you think"}',
    "x" * 200_000,
)


def request(
    prompt: str, key: str = "contract-1:1", function_key: str = "story_generate"
) -> SynthesisRequest:
    return SynthesisRequest(
        function_key=function_key, prompt=prompt, input={"n": 1}, idempotency_key=key
    )


def _is_response(answer: SynthesisResponse) -> bool:
    return (
        isinstance(answer.content, str)
        and bool(answer.model)
        and all(isinstance(k, str) and isinstance(v, int) for k, v in answer.usage.items())
    )


class SynthesizerContract:
    async def test_a_request_is_answered_with_content_model_and_usage(
        self, synthesizer: Synthesizer
    ) -> None:
        answer = await synthesizer.synthesize(request("Write stories for epic E-1: a login page"))
        assert _is_response(answer)
        assert answer.content

    @pytest.mark.parametrize("prompt", HOSTILE_PROMPTS, ids=range(len(HOSTILE_PROMPTS)))
    async def test_any_prompt_is_answered_or_refused_within_the_hierarchy(
        self, synthesizer: Synthesizer, prompt: str
    ) -> None:
        try:
            answer = await synthesizer.synthesize(request(prompt))
        except SpectralError:
            return
        assert _is_response(answer)

    async def test_concurrent_calls_each_get_their_own_answer(
        self, synthesizer: Synthesizer
    ) -> None:
        prompts = [f"Write stories for epic E-{n}: feature {n}" for n in range(8)]
        answers = await asyncio.gather(
            *(synthesizer.synthesize(request(p, f"c-{n}:1")) for n, p in enumerate(prompts))
        )
        assert all(_is_response(a) for a in answers)
        alone = [
            await synthesizer.synthesize(request(p, f"c-{n}:1")) for n, p in enumerate(prompts)
        ]
        assert [a.content for a in answers] == [a.content for a in alone]
