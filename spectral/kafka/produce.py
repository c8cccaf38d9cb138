"""Producing records whose content is not ours to choose (dead letters, redriven records).

The broker may refuse one record for good — too large for the topic (``MessageSizeTooLarge``,
which arrives through the delivery future, not from ``send``), an invalid topic name, no write
permission — while the rest of the batch is fine. :func:`send_each` reports such a refusal per
record instead of raising, so the caller can fall back for that record alone (a smaller form, a
database table, a skip) and go on; faults of the infrastructure (broker unreachable, leader
moving, timeouts) still raise, to be retried.

One refusal can take its batch-mates with it (the broker rejects a whole produce batch); so a
caller re-sends each refused record alone with :func:`send_alone` before concluding that the
record itself is refused.

:class:`Sender` is the same two calls as a seam a dead-letter sink produces through, whatever
the transport: :class:`AiokafkaSender` (an ``AIOKafkaProducer`` it owns) and the in-memory
broker's (spectral.kafka.memory).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from spectral.faults import is_transient
from spectral.kafka.config import refusable_producer_kwargs
from spectral.kafka.dlq import MAX_REQUEST_BYTES
from spectral.settings import Settings


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    key: bytes | None
    value: bytes
    headers: Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Sent:
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Refused:
    """The broker or the client can never take this record as it is."""

    why: str


Outcome = Sent | Refused


def _refusal(exc: BaseException) -> Refused:
    """``exc`` as a refusal of the record; raised again when it is a fault to retry."""
    if is_transient(exc):
        raise exc
    if isinstance(exc, KafkaError | ValueError | TypeError):
        return Refused(f"{type(exc).__name__}: {exc}"[:500])
    raise exc


async def _future(producer: AIOKafkaProducer, message: Message) -> Any:
    return await producer.send(
        message.topic, value=message.value, key=message.key, headers=list(message.headers)
    )


async def send_each(producer: AIOKafkaProducer, messages: Sequence[Message]) -> list[Outcome]:
    """Produce ``messages`` (pipelined) and wait for every acknowledgement; one outcome each, in
    order. Raises on a transient fault (after every delivery settled, so none is left behind)."""
    pending: list[asyncio.Future[Any] | Refused] = []
    for message in messages:
        try:
            pending.append(await _future(producer, message))
        except Exception as exc:  # noqa: BLE001 - classified: refusal kept, fault raised below
            pending.append(_refusal(exc))
    futures = [p for p in pending if not isinstance(p, Refused)]
    results = iter(await asyncio.gather(*futures, return_exceptions=True))
    out: list[Outcome] = []
    fault: BaseException | None = None
    for item in pending:
        if isinstance(item, Refused):
            out.append(item)
            continue
        result = next(results)
        if isinstance(result, BaseException):
            try:
                out.append(_refusal(result))
            except BaseException as exc:  # noqa: BLE001 - a fault: raised once all settled
                fault = fault or exc
                out.append(Refused("not acknowledged"))
            continue
        out.append(Sent(result.partition, result.offset))
    if fault is not None:
        raise fault
    return out


async def send_alone(producer: AIOKafkaProducer, message: Message) -> Outcome:
    """One record on its own (no batch-mate can take it down); a fault raises."""
    return (await send_each(producer, [message]))[0]


class Sender(Protocol):
    """Produces records whose content is not ours to choose (see the module docstring)."""

    async def start(self) -> None:
        """Connect (a transient failure raises; calling again retries)."""

    async def send_each(self, messages: Sequence[Message]) -> list[Outcome]:
        """One outcome per message, in order; a fault of the infrastructure raises once every
        delivery settled."""

    async def send_alone(self, message: Message) -> Outcome:
        """One record on its own; a fault raises."""

    async def stop(self) -> None:
        """Flush and close (safe to call again, and after a failed or no ``start``)."""


class AiokafkaSender:
    """A :class:`Sender` on an ``AIOKafkaProducer`` of its own: ``acks=all``, no idempotence
    (:func:`~spectral.kafka.config.refusable_producer_kwargs` says why)."""

    def __init__(
        self,
        settings: Settings,
        bootstrap: str,
        *,
        topics: Sequence[str] = (),
        delivery_timeout_ms: int | None = None,
    ) -> None:
        """``topics``: the topics whose metadata the producer tracks from the start;
        ``delivery_timeout_ms``: a delivery window longer than the request timeout."""
        self._settings = settings
        self._bootstrap = bootstrap
        self._topics = sorted(topics)
        self._delivery_timeout_ms = delivery_timeout_ms
        self._producer: AIOKafkaProducer | None = None
        self._started = False

    async def start(self) -> None:
        if self._started:
            return
        if self._producer is None:
            self._producer = AIOKafkaProducer(
                **refusable_producer_kwargs(
                    self._settings, self._bootstrap, delivery_timeout_ms=self._delivery_timeout_ms
                ),
                linger_ms=5,
                max_request_size=MAX_REQUEST_BYTES,  # dead letters carry the original bytes
                metadata_max_age_ms=int(self._settings.kafka_metadata_refresh_seconds * 1000),
            )
        await self._producer.start()
        # A producer that has sent nothing tracks no topic, and aiokafka then refreshes the
        # metadata of every topic of the cluster (each ``metadata_max_age_ms``): on a cluster of
        # 5,600 topics that was 84 ms of CPU every 5 s, a stall of the whole event loop. A dead
        # letter's topic is added when it is first sent.
        await self._producer.client.set_topics(self._topics)
        self._started = True

    def _client(self) -> AIOKafkaProducer:
        if self._producer is None or not self._started:
            msg = "the sender was not started"
            raise RuntimeError(msg)
        return self._producer

    async def send_each(self, messages: Sequence[Message]) -> list[Outcome]:
        return await send_each(self._client(), messages)

    async def send_alone(self, message: Message) -> Outcome:
        return await send_alone(self._client(), message)

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        self._started = False
        if producer is not None:
            await producer.stop()
