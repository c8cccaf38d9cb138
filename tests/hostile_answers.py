"""Hostile model answers: hypothesis strategies for what a synthesizer may hand back, and a fixed
corpus of raw HTTP answers of an OpenAI-compatible gateway (for the fake server's
``[script:NAME]`` marker) with the outcome each must come to.

What makes an answer hostile here: U+0000 and lone surrogates anywhere (content, model name,
usage keys, story fields, object keys, error bodies), nesting deeper than any parser recurses,
inputs that make a backtracking pattern take quadratic time, answers over the size limit,
bodies that are not chat completions, and exceptions of every kind from the call itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from producers.work.domain.story.validation import MAX_ANSWER_CHARS
from spectral.errors import PermanentError, TransientError
from spectral.llm.seam import SynthesisResponse, UnreadableAnswerError

# Every code point, U+0000 and the surrogates included (hypothesis leaves surrogates out unless
# told not to).
ANY_CHAR = st.characters(exclude_categories=())
ANY_TEXT = st.text(alphabet=ANY_CHAR, max_size=40)
HOSTILE_CHAR = st.sampled_from(["\x00", "\ud800", "\udfff", "\udc80", "\udbff"])


@st.composite
def hostile_text(draw: st.DrawFn) -> str:
    """Text that holds at least one code point PostgreSQL cannot store, somewhere."""
    before, after = draw(ANY_TEXT), draw(ANY_TEXT)
    return before + draw(HOSTILE_CHAR) + after


def _dumps(value: Any, *, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


@st.composite
def stories_answer(draw: st.DrawFn) -> str:
    """A ``{"stories": [...]}`` answer whose fields may be fine or hostile, escaped or raw."""
    field_text = st.one_of(
        st.text(
            alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=20
        ),
        hostile_text(),
    )
    story = st.fixed_dictionaries(
        {"story_key": field_text, "title": field_text},
        optional={
            "description": field_text,
            "acceptance_criteria": st.lists(field_text, max_size=3),
            draw(hostile_text()): st.integers(),  # an unknown (forbidden) key, itself hostile
        },
    )
    body: dict[str, object] = {"stories": draw(st.lists(story, max_size=4))}
    if draw(st.booleans()):
        body[draw(hostile_text())] = draw(ANY_TEXT)  # unknown top-level field: ignored
    text = _dumps(body, ascii_only=draw(st.booleans()))
    wrap = draw(st.sampled_from(["", "fence", "trailing_nul"]))
    if wrap == "fence":
        return f"```json\n{text}\n```"
    if wrap == "trailing_nul":
        return text + "\x00"
    return text


def deep(depth: int, opening: str = "[", closing: str = "]") -> str:
    return opening * depth + closing * depth


ANSWER_CONTENT = st.one_of(
    stories_answer(),
    ANY_TEXT,
    hostile_text(),
    st.integers(900, 60_000).map(deep),
    st.integers(900, 60_000).map(lambda n: '{"stories": ' + deep(n)),
    st.integers(900, 30_000).map(lambda n: deep(n, '{"a":', "}")),
    st.integers(1_000, 40_000).map(lambda n: "```\n" + "\n" * n),  # quadratic for a backtracker
    st.integers(1_000, 40_000).map(lambda n: "```" + " " * n + "x"),
    st.sampled_from(["null", "[]", "1e999", '"text"', "{}", '{"stories": null}']),
)
MODEL_NAME = st.one_of(st.just("model-1"), ANY_TEXT, hostile_text())
USAGE = st.dictionaries(
    st.one_of(st.sampled_from(["prompt_tokens", "total_tokens"]), ANY_TEXT),
    st.one_of(st.integers(-(2**70), 2**70), st.booleans(), st.none(), ANY_TEXT),
    max_size=4,
)


@dataclass(frozen=True)
class Behaviour:
    """What a scripted synthesizer does for one item, every time it is called."""

    content: str | None = None
    model: str = "model-1"
    usage: dict[str, Any] | None = None
    raises: Exception | None = None
    returns_garbage: bool = False

    def answer(self) -> Any:
        """A ``SynthesisResponse`` — or, for a broken synthesizer, ``None``."""
        if self.raises is not None:
            raise self.raises
        if self.returns_garbage:
            return None
        assert self.content is not None
        return SynthesisResponse(content=self.content, model=self.model, usage=self.usage or {})


@st.composite
def behaviours(draw: st.DrawFn) -> Behaviour:
    kind = draw(st.sampled_from(["answer", "answer", "answer", "raise", "garbage"]))
    if kind == "garbage":
        return Behaviour(returns_garbage=True)
    if kind == "raise":
        message = draw(st.one_of(ANY_TEXT, hostile_text()))
        exc = draw(
            st.sampled_from(
                [
                    TransientError(message),
                    PermanentError(message),
                    UnreadableAnswerError(
                        message, body=message.encode("utf-8", "surrogatepass"), model=message
                    ),
                    ValueError(message),
                    RecursionError(message),
                    KeyError(message),
                ]
            )
        )
        return Behaviour(raises=exc)
    return Behaviour(content=draw(ANSWER_CONTENT), model=draw(MODEL_NAME), usage=draw(USAGE))


# -- raw HTTP answers of a gateway, for the fake OpenAI-compatible server ---------------------


def chat_body(content: Any, *, model: Any = "fake-model-1", usage: Any = None) -> bytes:
    """A chat-completions body, JSON-escaped as a gateway sends it (``\\u0000``, ``\\ud800``)."""
    body = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": usage if usage is not None else {"prompt_tokens": 1, "total_tokens": 2},
    }
    return json.dumps(body, ensure_ascii=True).encode("ascii")


def _stories(title: str = "As a user I can pay", key: str = "K-1") -> str:
    return json.dumps({"stories": [{"story_key": key, "title": title}]}, ensure_ascii=False)


@dataclass(frozen=True)
class Case:
    status: int
    body: bytes
    outcome: str  # the item's end: applied | dead_letter
    calls: int  # paid calls the item makes in all (attempts)


def corpus(max_attempts: int) -> dict[str, Case]:
    """Every hostile answer class once, with the end it must come to."""
    dead, ok = "dead_letter", "applied"
    return {
        "valid": Case(200, chat_body(_stories()), ok, 1),
        "fenced": Case(200, chat_body(f"```json\n{_stories()}\n```"), ok, 1),
        "nul_in_title": Case(200, chat_body(_stories("pay\x00now")), dead, 1),
        "surrogate_in_key": Case(200, chat_body(_stories(key="\ud800")), dead, 1),
        "nul_key": Case(
            200,
            chat_body(json.dumps({"stories": [{"story_key": "a", "title": "t", "\x00": 1}]})),
            dead,
            1,
        ),
        "trailing_nul": Case(200, chat_body(_stories() + "\x00"), dead, 1),
        "lone_surrogate_content": Case(200, chat_body("\udc80" + _stories()), dead, 1),
        "nul_model_valid": Case(200, chat_body(_stories(), model="gpt\x00x"), ok, 1),
        "surrogate_model_valid": Case(200, chat_body(_stories(), model="\ud83d"), ok, 1),
        "hostile_usage_valid": Case(
            200,
            chat_body(
                _stories(), usage={"\x00": 1, "total_tokens": 10**30, "x": {"y": 1}, "b": True}
            ),
            ok,
            1,
        ),
        "deep_content": Case(200, chat_body(deep(100_000)), dead, 1),
        "deep_stories": Case(200, chat_body('{"stories": ' + deep(50_000)), dead, 1),
        "fence_backtracking": Case(200, chat_body("```\n" + "\n" * 100_000), dead, 1),
        "over_size": Case(200, chat_body("x" * (MAX_ANSWER_CHARS + 1)), dead, 1),
        "deep_body": Case(200, deep(100_000).encode(), dead, 1),
        "not_json_body": Case(200, b"\xff\xfe\x00not json", dead, 1),
        "no_choices": Case(200, json.dumps({"usage": {"total_tokens": 3}}).encode(), dead, 1),
        "null_content": Case(200, chat_body(None), dead, 1),
        "refused_with_nul_body": Case(400, b'{"error": "bad\x00request \\u0000 \xff"}', dead, 1),
        "server_error": Case(503, b"\x00overloaded", dead, max_attempts),
    }
