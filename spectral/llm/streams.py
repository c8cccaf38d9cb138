"""Reading a streamed chat completion (server-sent events) up to the call's completion bound.

A stream is ``data: {chunk}`` events — each chunk's ``choices[0].delta.content`` a piece of the
answer, a last one carrying ``usage`` — ended by ``data: [DONE]``. ``StreamReader`` is fed the
bytes as they come and says when to stop reading:

* at ``[DONE]`` (or when the stream ends);
* at the **completion bound** (``max_tokens``): once more content chunks came in than the bound
  (a chunk that carries text carries at least one token), more than ``MAX_BYTES_PER_TOKEN``
  bytes of text per token allowed (a gateway that packs many tokens into a chunk), or a usage
  chunk reporting more completion tokens than allowed. The answer is then ``stopped_at_bound``:
  its text is what had come in, and it reports no usage — the caller settles the call at its
  reservation, the most it can cost on spectral's side;
* when an event line grows past ``MAX_EVENT_BYTES`` (a gateway that never sends a newline).

Pure: no I/O, so every rule is tested without a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from spectral.errors import PermanentError
from spectral.llm.seam import SynthesisResponse

MAX_BYTES_PER_TOKEN: Final = 32
"""More text than this per allowed token means the provider went past its bound."""
MAX_EVENT_BYTES: Final = 1 << 20


class StreamError(PermanentError, ValueError):
    """The stream is not a chat-completion stream (an event is not JSON)."""


@dataclass
class StreamReader:
    bound: int | None
    """The completion bound (max_tokens) the call was sent; None: read to the end."""
    model: str
    pieces: list[str] = field(default_factory=list)
    chunks: int = 0
    text_bytes: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    stopped: bool = False
    raw: bytearray = field(default_factory=bytearray)
    _buffer: bytes = b""

    def feed(self, data: bytes) -> bool:
        """Take the next bytes; True when reading must stop (done, or the bound reached)."""
        if len(self.raw) < MAX_EVENT_BYTES:
            self.raw.extend(data[: MAX_EVENT_BYTES - len(self.raw)])
        self._buffer += data
        while b"\n" in self._buffer and not (self.done or self.stopped):
            line, self._buffer = self._buffer.split(b"\n", 1)
            self._line(line.strip())
        if len(self._buffer) > MAX_EVENT_BYTES:
            self.stopped = True
        return self.done or self.stopped

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return  # comments, event names, ids, blank separators
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise StreamError(f"a stream event that is not JSON ({type(exc).__name__})") from exc
        if not isinstance(event, dict):
            raise StreamError("a stream event that is not a JSON object")
        if isinstance(event.get("model"), str):
            self.model = event["model"]
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        text = _delta(event)
        if text:
            self.pieces.append(text)
            self.chunks += 1
            self.text_bytes += len(text.encode("utf-8", "surrogatepass"))
        self.stopped = self._past_bound()

    def _past_bound(self) -> bool:
        if self.bound is None:
            return False
        completion = self.usage.get("completion_tokens")
        reported = isinstance(completion, int) and completion > self.bound
        return (
            self.chunks > self.bound
            or self.text_bytes > self.bound * MAX_BYTES_PER_TOKEN
            or reported
        )

    def response(self) -> SynthesisResponse:
        """The answer as read: stopped at the bound (no usage: billed at the reservation), or
        whole, with the usage the stream reported."""
        content = "".join(self.pieces)
        if self.stopped and self.bound is not None:
            return SynthesisResponse(content, self.model, {}, stopped_at_bound=self.bound)
        usage = {
            k: v
            for k, v in self.usage.items()
            if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        }
        return SynthesisResponse(content, self.model, usage)


def _delta(event: dict[str, Any]) -> str | None:
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    delta = choices[0].get("delta")
    if not isinstance(delta, dict):
        return None
    content = delta.get("content")
    return content if isinstance(content, str) else None
