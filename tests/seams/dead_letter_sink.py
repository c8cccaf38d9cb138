"""The dead-letter sink contract (spectral.engine.dead_letters.DeadLetterSink): once ``put``
returns, every dead letter it was given is accounted for — in ``T.dlq`` in full or as its
reference, in ``core.dead_letters``, or in a report — once, in source order, whatever its size.
A concrete suite subclasses :class:`DeadLetterSinkContract` and provides the ``world`` fixture:
a :class:`SinkWorld`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal

from spectral.engine.dead_letters import DeadLetterSink
from spectral.kafka.dlq import DeadLetter

Form = Literal["full", "reference", "table", "noted"]


class SinkWorld(ABC):
    @abstractmethod
    async def source_topic(self, *, dlq_max_bytes: int | None = None) -> str:
        """A new source topic; its dead-letter topic refuses records over ``dlq_max_bytes``."""

    @abstractmethod
    def sink(self) -> DeadLetterSink:
        """A sink of the implementation under test (not started)."""

    @abstractmethod
    async def accounted(self, source_topic: str) -> list[tuple[int, str, Form]]:
        """What the sink kept of ``source_topic``'s dead letters: (source offset, reason,
        form), in the order kept."""


def letter(topic: str, offset: int, *, size: int = 10, reason: str = "handler_error") -> DeadLetter:
    return DeadLetter(
        reason=reason,
        detail=f"test letter {offset}",
        source_topic=topic,
        source_partition=0,
        source_offset=offset,
        consumer="contract",
        key=f"k{offset}".encode(),
        value=b"v" * size,
        original_headers=(("event_type", b"t"), ("null", None)),
    )


class DeadLetterSinkContract:
    large_forms: tuple[Form, ...] = ("reference", "table")
    """What a letter too large for its dead-letter topic may become."""

    async def test_every_letter_is_kept_in_source_order_once_put_returns(
        self, world: SinkWorld
    ) -> None:
        topic = await world.source_topic()
        sink = world.sink()
        await sink.start()
        try:
            await sink.put([letter(topic, o, reason=f"r{o}") for o in range(5)])
            await sink.put([letter(topic, 5)])
        finally:
            await sink.close()
        kept = await world.accounted(topic)
        assert [(o, r) for o, r, _ in kept] == [
            *[(o, f"r{o}") for o in range(5)],
            (5, "handler_error"),
        ]

    async def test_a_letter_too_large_for_its_topic_is_kept_another_way_beside_the_others(
        self, world: SinkWorld
    ) -> None:
        topic = await world.source_topic(dlq_max_bytes=2048)
        sink = world.sink()
        await sink.start()
        try:
            await sink.put([letter(topic, 0), letter(topic, 1, size=64 * 1024), letter(topic, 2)])
        finally:
            await sink.close()
        kept = {offset: form for offset, _, form in await world.accounted(topic)}
        assert set(kept) == {0, 1, 2}
        assert kept[1] in self.large_forms
        assert kept[0] == kept[2]

    async def test_a_letter_even_whose_reference_is_refused_is_still_kept(
        self, world: SinkWorld
    ) -> None:
        topic = await world.source_topic(dlq_max_bytes=64)  # smaller than any reference
        sink = world.sink()
        await sink.start()
        try:
            await sink.put([letter(topic, 0, size=4096)])
        finally:
            await sink.close()
        assert [(o, form in self.large_forms) for o, _, form in await world.accounted(topic)] == [
            (0, True)
        ]

    async def test_close_is_safe_without_start_and_twice(self, world: SinkWorld) -> None:
        sink = world.sink()
        await sink.close()
        sink = world.sink()
        await sink.start()
        await sink.close()
        await sink.close()
