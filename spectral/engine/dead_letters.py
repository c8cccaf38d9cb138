"""Where the engine's dead letters go: a sink takes each batch's dead letters before its offsets
are committed.

:class:`KafkaDeadLetters` (the live consumer, an applying replay) produces each dead letter to
``T.dlq`` and never gives up on one for its content — whatever its key, headers, size or bytes:

1. the full dead letter (original key, value and headers plus the ``dlq.*`` headers), all of the
   batch's pipelined;
2. one the broker refused, alone (a refused produce batch takes its batch-mates with it);
3. refused again: its reference (:meth:`DeadLetter.as_reference`: no value, no original
   headers, a short key at most — a few hundred bytes), counted as fallback ``reference``;
4. refused even so (the dead-letter topic's record limit below that, an invalid topic name, no
   permission): a row of the database table ``core.dead_letters`` with the record's coordinates
   and as much of it as fits, counted as fallback ``table`` and logged as an error.

So the partition keeps flowing and nothing is lost. A fault of the infrastructure (broker or
database unreachable) is raised instead, and the engine retries the whole step. It produces
through a :class:`~spectral.kafka.produce.Sender` it owns (started and stopped with the sink),
so the rules hold on every transport.

:class:`ReportedDeadLetters` (dry runs, rebuilds) produces nothing and keeps the first
:data:`NOTED` dead letters for the report.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from spectral.dlq import store
from spectral.engine.metrics import ConsumerMetrics
from spectral.kafka.dlq import DETAIL_LIMIT, DeadLetter
from spectral.kafka.produce import Message, Refused, Sender
from spectral.kafka.topics import dlq_topic
from spectral.observability.logging import get_logger

log = get_logger(__name__)

NOTED = 100
"""A report lists at most this many dead letters (all are counted)."""


class DeadLetterSink(ABC):
    """Where a run's dead letters go; ``start`` before the first ``put``, ``close`` at the end
    (both no-ops unless the sink holds a client)."""

    async def start(self) -> None:  # noqa: B027 - a documented no-op default, overridden by sinks with a client
        """Connect (a transient failure raises; calling again retries)."""

    @abstractmethod
    async def put(self, letters: Sequence[DeadLetter]) -> None:
        """Take one batch's dead letters (in source order); return once they are durable."""

    async def close(self) -> None:  # noqa: B027 - a documented no-op default, as ``start``
        """Release what ``start`` took (safe after a failed or no ``start``)."""


def _message(letter: DeadLetter) -> Message:
    return Message(dlq_topic(letter.source_topic), letter.key, letter.value, letter.headers())


class KafkaDeadLetters(DeadLetterSink):
    """Dead letters to ``T.dlq``, falling back to a reference, then to ``core.dead_letters``."""

    def __init__(
        self,
        sender: Sender,
        connections: Callable[[], AbstractAsyncContextManager[Any]],
        metrics: ConsumerMetrics,
    ) -> None:
        """``connections()`` lends a database connection (the engine's pool) for the table."""
        self._sender = sender
        self._connections = connections
        self._metrics = metrics

    async def start(self) -> None:
        await self._sender.start()

    async def close(self) -> None:
        await self._sender.stop()

    async def put(self, letters: Sequence[DeadLetter]) -> None:
        outcomes = await self._sender.send_each([_message(d) for d in letters])
        unsent: list[store.Refused] = []
        for letter, outcome in zip(letters, outcomes, strict=True):
            if isinstance(outcome, Refused):
                refusal = await self._fall_back(letter, outcome)
                if refusal is not None:
                    unsent.append(refusal)
        if unsent:
            async with self._connections() as conn:
                await store.record(conn, unsent)
            for refused in unsent:
                self._metrics.fallbacks["table"].inc()
                log.error(
                    "dead letter refused by the broker even as a reference; recorded in "
                    "core.dead_letters",
                    source=refused.letter.source,
                    reason=refused.letter.reason,
                    refusal=refused.refusal,
                )

    async def _fall_back(self, letter: DeadLetter, refused: Refused) -> store.Refused | None:
        """Steps 2 and 3 for one refused dead letter; what is left for the table (step 4)."""
        alone = await self._sender.send_alone(_message(letter))
        if not isinstance(alone, Refused):
            return None
        reference = letter.as_reference(alone.why)
        sent = await self._sender.send_alone(_message(reference))
        if not isinstance(sent, Refused):
            self._metrics.fallbacks["reference"].inc()
            log.warning(
                "dead letter produced as a reference",
                source=letter.source,
                size=letter.size(),
                refusal=alone.why,
            )
            return None
        return store.Refused(letter, f"{refused.why}; as a reference: {sent.why}")


@dataclass(frozen=True, slots=True)
class DeadLetterNote:
    reason: str
    detail: str
    source: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "detail": self.detail, "source": self.source}


class ReportedDeadLetters(DeadLetterSink):
    """Dry runs and rebuilds: dead letters are remembered for the report, never produced."""

    def __init__(self) -> None:
        self.notes: list[DeadLetterNote] = []

    async def put(self, letters: Sequence[DeadLetter]) -> None:
        room = max(NOTED - len(self.notes), 0)
        self.notes.extend(
            DeadLetterNote(d.reason, d.detail[: min(300, DETAIL_LIMIT)], d.source)
            for d in letters[:room]
        )
