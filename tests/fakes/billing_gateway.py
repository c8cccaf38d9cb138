"""A model gateway on loopback that bills per idempotency key, as a provider honouring the key
does: the first request of a key is answered (after ``delay`` seconds) and billed once it is
answered — even when its caller died meanwhile, as a provider finishes and bills a generation
whose client went away; a later request of a key already billed (or being answered) gets the same
answer and is not billed again. ``bills`` counts the bills of each key, ``calls`` records every
request.

It answers the rule-stub function (``{"rule_stub": ...}``) and, for any other prompt, the
stories of the fake OpenAI-compatible server it extends (same HTTP surface, same thread)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from tests.fakes.openai_server import FakeModelServer, RecordedCall

RULE_STUB = "rule: from the billing gateway"
"""The stub every rule-stub answer carries."""


@dataclass
class BillingGateway(FakeModelServer):
    delay: float = 0.0
    bills: Counter[str] = field(default_factory=Counter)
    _answers: dict[str, asyncio.Task[dict[str, Any]]] = field(default_factory=dict)

    def billed(self) -> Counter[str]:
        with self._lock:
            return Counter(self.bills)

    def in_progress(self) -> set[str]:
        """The keys whose first request is being answered (not billed yet)."""
        with self._lock:
            return {k for k in self._answers if k not in self.bills}

    def bill(self, key: str) -> None:
        """A bill of ``key`` made before this gateway started (a call of an earlier process
        that the provider completed)."""
        with self._lock:
            self.bills[key] += 1

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def complete(request: Request) -> Response:
            body = await request.json()
            key = request.headers.get("idempotency-key") or ""
            call = RecordedCall(key, request.headers.get("authorization"), body, time.time())
            with self._lock:
                self.calls.append(call)
                task = self._answers.get(key)
                if task is None:
                    billed = key in self.bills  # before this gateway started
                    answer = self._replay(call.prompt) if billed else self._answer(key, call.prompt)
                    task = self._answers[key] = asyncio.create_task(answer)
            # Shielded: a caller that goes away does not stop the generation (nor its bill).
            return JSONResponse(await asyncio.shield(task))

        return app

    async def _answer(self, key: str, prompt: str) -> dict[str, Any]:
        await asyncio.sleep(self.delay)
        answer = self._completion(prompt)
        with self._lock:
            self.bills[key] += 1
            self.answered.append(key)
        return answer

    async def _replay(self, prompt: str) -> dict[str, Any]:
        return self._completion(prompt)

    def _completion(self, prompt: str) -> dict[str, Any]:
        if "rule stub" in prompt:
            content = json.dumps({"rule_stub": RULE_STUB})
        else:
            content = self.stories(prompt)
        return {
            "id": "chatcmpl-billing",
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
