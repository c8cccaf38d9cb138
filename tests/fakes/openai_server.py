"""A fake OpenAI-compatible chat-completions server on loopback that records every request.

It runs uvicorn in a daemon thread of the test process, so an executor in *another* process
(the fault tests SIGKILL it) calls it over real HTTP and the test counts the paid calls here.

Behaviour is scripted by markers in the prompt (the executor's prompt carries the epic title):

* ``[slow:S]``         — sleep S seconds before answering (a call in flight to kill the caller in);
* ``[transient:N]``    — answer 503 to the first N calls of that work item (key prefix), then OK;
* ``[ratelimited:N:S]`` — answer 429 with ``Retry-After: S`` to the first N calls of that item;
* ``[permanent]``      — answer 400;
* ``[invalid]``        — answer 200 with content that is not the promised JSON;
* ``[script:NAME]``    — answer ``scripts[NAME]``: a status and the exact body bytes (hostile
  bodies: content with U+0000 or lone surrogates, deep nesting, bodies that are not JSON);
* otherwise            — 200 with a valid ``{"stories": [...]}`` JSON content.

A request with ``"stream": true`` is answered as a stream of server-sent events (chunks of
``choices[0].delta.content``, one word each, then a usage chunk and ``data: [DONE]``); with
``[endless]`` in the prompt the stream never ends (a hostile gateway ignoring ``max_tokens``):
``streamed`` counts the chunks sent and ``stream_closed`` is set when the caller hung up.

``idempotent=True`` makes it a gateway that honours ``Idempotency-Key``: the first call of a key
is done (to its end, even if its caller goes away) and billed; a repeated key gets that same
answer, waiting for it if it is still being made, and is not billed again. ``answered`` holds
one key per answer billed; :meth:`billed_before` names keys an earlier process's calls were
billed under (answered again, not billed); :meth:`in_progress` the keys being answered.

A prompt that asks for a rule stub (the ``rule_stub`` work function) is answered with
``{"rule_stub": RULE_STUB}``; ``delay`` makes every answer take that many seconds.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Self

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

_SLOW = re.compile(r"\[slow:(\d+(?:\.\d+)?)\]")
_TRANSIENT = re.compile(r"\[transient:(\d+)\]")
_RATE_LIMITED = re.compile(r"\[ratelimited:(\d+):(\d+)\]")
_EPIC = re.compile(r"epic (\S+?):")
_SCRIPT = re.compile(r"\[script:([A-Za-z0-9_-]+)\]")
_RULE_STUB_ASKED = 'Answer with a JSON object {"rule_stub": "..."}'
"""How the rule-stub work function's prompt ends (producers/clusters/snapshot.py)."""
RULE_STUB = "rule: from the fake gateway"
"""The stub every rule-stub answer carries."""


@dataclass(frozen=True)
class RecordedCall:
    idempotency_key: str | None
    authorization: str | None
    body: dict[str, Any]
    received_at: float

    @property
    def item(self) -> str:
        return (self.idempotency_key or "").split(":")[0]

    @property
    def prompt(self) -> str:
        messages = self.body.get("messages") or [{}]
        return str(messages[-1].get("content", ""))


@dataclass
class FakeModelServer:
    """``with FakeModelServer() as server: server.url`` — calls land in ``server.calls``."""

    model: str = "fake-model-1"
    scripts: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    calls: list[RecordedCall] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    idempotent: bool = False
    delay: float = 0.0
    streamed: int = 0
    stream_closed: bool = False
    _first: dict[str, asyncio.Task[Response]] = field(default_factory=dict)
    _billed_before: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def calls_for(self, item: str) -> list[RecordedCall]:
        with self._lock:
            return [c for c in self.calls if c.item == item]

    def snapshot(self) -> list[RecordedCall]:
        with self._lock:
            return list(self.calls)

    def billed_before(self, *keys: str) -> None:
        """Keys the provider billed before this server started (calls of an earlier process
        that it completed): with ``idempotent``, a request of one is answered, not billed."""
        with self._lock:
            self._billed_before.update(keys)

    def in_progress(self) -> set[str]:
        """The keys whose first call is being answered (``idempotent``)."""
        with self._lock:
            return {key for key, first in self._first.items() if not first.done()}

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def complete(request: Request) -> Response:
            body = await request.json()
            call = RecordedCall(
                idempotency_key=request.headers.get("idempotency-key"),
                authorization=request.headers.get("authorization"),
                body=body,
                received_at=time.time(),
            )
            with self._lock:
                self.calls.append(call)
                earlier = sum(1 for c in self.calls if c.item == call.item) - 1
            key = call.idempotency_key
            if self.idempotent and key:
                with self._lock:  # in_progress reads _first from the test's thread
                    first = self._first.get(key)
                    if first is None:
                        bill = key not in self._billed_before
                        first = self._first[key] = asyncio.ensure_future(
                            self._respond(call, earlier, bill=bill)
                        )
                return await asyncio.shield(first)
            return await self._respond(call, earlier)

        return app

    async def _respond(self, call: RecordedCall, earlier: int, *, bill: bool = True) -> Response:
        prompt = call.prompt
        slow = _SLOW.search(prompt)
        if slow or self.delay:
            await asyncio.sleep(max(float(slow.group(1)) if slow else 0.0, self.delay))
        transient = _TRANSIENT.search(prompt)
        if transient and earlier < int(transient.group(1)):
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        limited = _RATE_LIMITED.search(prompt)
        if limited and earlier < int(limited.group(1)):
            return JSONResponse(
                {"error": {"message": "rate limited"}},
                status_code=429,
                headers={"Retry-After": limited.group(2)},
            )
        script = _SCRIPT.search(prompt)
        if script:
            status, raw = self.scripts[script.group(1)]
            if bill:
                with self._lock:
                    self.answered.append(call.idempotency_key or "")
            return Response(raw, status_code=status, media_type="application/json")
        if "[permanent]" in prompt:
            return JSONResponse({"error": {"message": "bad request"}}, status_code=400)
        content = self._content(prompt)
        if bill:
            with self._lock:
                self.answered.append(call.idempotency_key or "")
        if call.body.get("stream") is True:
            return StreamingResponse(
                self._stream(content, endless="[endless]" in prompt),
                media_type="text/event-stream",
            )
        return JSONResponse(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33},
            }
        )

    def _content(self, prompt: str) -> str:
        if "[invalid]" in prompt:
            return "this is not JSON"
        if _RULE_STUB_ASKED in prompt:
            return json.dumps({"rule_stub": RULE_STUB})
        return self.stories(prompt)

    async def _stream(self, content: str, *, endless: bool) -> AsyncIterator[bytes]:
        def event(data: object) -> bytes:
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        def chunk(text: str) -> bytes:
            delta = {"index": 0, "delta": {"content": text}, "finish_reason": None}
            return event(
                {"object": "chat.completion.chunk", "model": self.model, "choices": [delta]}
            )

        try:
            words = content.split(" ")
            for n, word in enumerate(words):
                self.streamed += 1
                yield chunk(word if n == len(words) - 1 else word + " ")
            while endless:
                self.streamed += 1
                yield chunk(" more")
                await asyncio.sleep(0.001)
            usage = {"prompt_tokens": 11, "completion_tokens": len(words), "total_tokens": 0}
            yield event({"object": "chat.completion.chunk", "choices": [], "usage": usage})
            yield b"data: [DONE]\n\n"
        finally:
            self.stream_closed = True

    @staticmethod
    def stories(prompt: str) -> str:
        match = _EPIC.search(prompt)
        epic = match.group(1) if match else "epic"
        return json.dumps(
            {
                "stories": [
                    {
                        "story_key": f"{epic}-1",
                        "title": f"As a user I can use {epic}",
                        "description": "From the fake model.",
                        "acceptance_criteria": ["it works"],
                    }
                ]
            }
        )

    def start(self) -> Self:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = uvicorn.Config(
            self._app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake model server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
