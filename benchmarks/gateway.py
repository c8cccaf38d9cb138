"""A fake OpenAI-compatible gateway for the benchmarks, on loopback only (``python -m
benchmarks.gateway --port P ...``): it behaves like a provider under load.

* ``POST /v1/chat/completions`` — answers after a latency drawn from a lognormal distribution
  (``--median`` and ``--p99`` seconds: the median and the 99th percentile; the mean follows,
  e^(sigma^2/2) x the median), with a valid story-generation answer for the epic the prompt
  names and a fixed usage (``--prompt-tokens``, ``--completion-tokens``), so the cost of a
  workload is known in advance;
* at most ``--concurrency`` calls run at once: one more is refused, ``429`` with
  ``Retry-After: 1``;
* at most ``--rate`` calls start per second (a token bucket holding one second's worth): beyond
  it, ``429`` with the ``Retry-After`` until a token is back;
* ``GET /stats`` — what happened: calls per ``Idempotency-Key`` (the most any key got), answers,
  refusals by cause, every answered call's start, end and latency, and the time-weighted mean
  of calls in flight.

One process, one event loop; the executor under test is another process, so the gateway's CPU
is not the executor's. Draws come from a seeded generator (``--seed``): one run's latencies are
reproducible.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import orjson
import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

Z99: Final = 2.3263478740  # the standard normal's 99th percentile
_EPIC = re.compile(r"epic (\S+?):")
_LONGEST: Final = 60.0


class Gateway:
    def __init__(
        self,
        *,
        concurrency: int,
        rate: float,
        median: float,
        p99: float,
        prompt_tokens: int,
        completion_tokens: int,
        seed: int,
    ) -> None:
        self.concurrency = concurrency
        self.rate = rate
        self.mu = math.log(median)
        self.sigma = math.log(p99 / median) / Z99
        self.usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        self.rng = random.Random(seed)
        self.bucket = rate
        self.refilled = time.monotonic()
        self.in_flight = 0
        self.most_in_flight = 0
        self.busy_since = time.monotonic()
        self.in_flight_seconds = 0.0
        self.keys: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.answered: list[tuple[float, float, float]] = []
        """(start, end, latency) of every answered call, wall clock."""

    # -- ASGI -------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/stats":
            await _respond(send, 200, self.stats())
            return
        if scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
            await _respond(send, 404, {"error": {"message": "not found"}})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = dict(scope["headers"])
        key = headers.get(b"idempotency-key", b"").decode()
        self.keys[key] += 1
        refusal = self._admit()
        if refusal is not None:
            cause, wait = refusal
            self.refused[cause] += 1
            await _respond(send, 429, {"error": {"message": cause}}, retry_after=wait)
            return
        started = time.time()
        latency = min(self.rng.lognormvariate(self.mu, self.sigma), _LONGEST)
        self._account(+1)
        try:
            await asyncio.sleep(latency)
        finally:
            self._account(-1)
        self.answered.append((started, time.time(), latency))
        await _respond(send, 200, self._answer(body))

    # -- capacity ---------------------------------------------------------------------------------

    def _admit(self) -> tuple[str, int] | None:
        if self.in_flight >= self.concurrency:
            return "concurrency", 1
        now = time.monotonic()
        self.bucket = min(self.rate, self.bucket + (now - self.refilled) * self.rate)
        self.refilled = now
        if self.bucket < 1:
            return "rate", max(1, math.ceil((1 - self.bucket) / self.rate))
        self.bucket -= 1
        return None

    def _account(self, change: int) -> None:
        now = time.monotonic()
        self.in_flight_seconds += self.in_flight * (now - self.busy_since)
        self.busy_since = now
        self.in_flight += change
        self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def _answer(self, body: bytes) -> dict[str, Any]:
        try:
            prompt = str(orjson.loads(body)["messages"][-1]["content"])
        except (ValueError, KeyError, IndexError, TypeError):
            prompt = ""
        match = _EPIC.search(prompt)
        epic = match.group(1) if match else "E"
        stories = {
            "stories": [
                {
                    "story_key": f"{epic}-{n}",
                    "title": f"As a shopper I can finish step {n} of {epic}",
                    "description": "Generated by the benchmark gateway.",
                    "acceptance_criteria": ["it works", "it is fast"],
                }
                for n in (1, 2)
            ]
        }
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "model": "bench-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": orjson.dumps(stories).decode()},
                    "finish_reason": "stop",
                }
            ],
            "usage": self.usage,
        }

    def stats(self) -> dict[str, Any]:
        self._account(0)
        return {
            "calls": sum(self.keys.values()),
            "keys": len(self.keys),
            "most_calls_per_key": max(self.keys.values(), default=0),
            "paid_twice": sum(1 for n in self.keys.values() if n > 1),
            "keys_called_twice": sorted(k for k, n in self.keys.items() if n > 1)[:20],
            "refused": dict(self.refused),
            "answered": self.answered,
            "most_in_flight": self.most_in_flight,
            "in_flight_seconds": self.in_flight_seconds,
            "usage": self.usage,
        }


async def _respond(
    send: Send, status: int, payload: dict[str, Any], *, retry_after: int | None = None
) -> None:
    body = orjson.dumps(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gateway", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rate", type=float, default=40.0, help="calls started per second")
    parser.add_argument("--median", type=float, default=1.0, help="seconds")
    parser.add_argument("--p99", type=float, default=6.0, help="seconds")
    parser.add_argument("--prompt-tokens", type=int, default=120)
    parser.add_argument("--completion-tokens", type=int, default=180)
    parser.add_argument("--seed", type=int, default=20261124)
    args = parser.parse_args()
    gateway = Gateway(
        concurrency=args.concurrency,
        rate=args.rate,
        median=args.median,
        p99=args.p99,
        prompt_tokens=args.prompt_tokens,
        completion_tokens=args.completion_tokens,
        seed=args.seed,
    )
    uvicorn.run(
        gateway,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        lifespan="off",
        access_log=False,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
