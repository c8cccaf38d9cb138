"""The sender contract (spectral.kafka.produce.Sender): how the dead letters of every transport
reach ``T.dlq``. A concrete suite subclasses :class:`SenderContract` and provides the ``world``
fixture: a :class:`SenderWorld` on its broker."""

from __future__ import annotations

from abc import ABC, abstractmethod

from spectral.kafka.produce import Message, Refused, Sender, Sent
from tests.seams.record_source import Headers

LIMIT = 4096
"""``max.message.bytes`` of the suite's size-limited topics."""


class SenderWorld(ABC):
    @abstractmethod
    async def topic(self, partitions: int = 1, *, max_message_bytes: int | None = None) -> str:
        """A new, empty topic (records larger than ``max_message_bytes`` refused)."""

    @abstractmethod
    def sender(self) -> Sender:
        """A sender of the implementation under test (not started)."""

    @abstractmethod
    async def read(self, topic: str) -> list[tuple[int, bytes | None, bytes | None, Headers]]:
        """Every record of ``topic``: (partition, key, value, headers), in offset order."""


class SenderContract:
    async def test_each_message_is_sent_in_order_with_its_bytes(self, world: SenderWorld) -> None:
        topic = await world.topic()
        messages = [
            Message(topic, None, b"no key", []),
            Message(topic, b"\x00\xff", b"\xff\xfe", [("h", None), ("h", b"2")]),
            Message(topic, b"k", b"", [("dlq.reason", b"decode_error")]),
        ]
        sender = world.sender()
        await sender.start()
        try:
            outcomes = await sender.send_each(messages)
        finally:
            await sender.stop()
        assert all(isinstance(o, Sent) for o in outcomes)
        assert [o.offset for o in outcomes if isinstance(o, Sent)] == [0, 1, 2]
        read = await world.read(topic)
        assert [(k, v, tuple(h)) for _, k, v, h in read] == [
            (m.key, m.value, tuple(m.headers)) for m in messages
        ]

    async def test_a_record_too_large_is_refused_alone(self, world: SenderWorld) -> None:
        topic = await world.topic(max_message_bytes=LIMIT)
        small = Message(topic, b"a", b"x" * 10, [])
        large = Message(topic, b"b", b"y" * (4 * LIMIT), [])
        sender = world.sender()
        await sender.start()
        try:
            outcomes = await sender.send_each([small, large])
            refused = outcomes[1]
            alone = await sender.send_alone(large)
            again = await sender.send_alone(small)
        finally:
            await sender.stop()
        assert isinstance(refused, Refused)
        assert refused.why
        assert isinstance(alone, Refused)
        assert isinstance(again, Sent)
        values = [v for _, _, v, _ in await world.read(topic)]
        assert b"y" * (4 * LIMIT) not in values
        assert values.count(b"x" * 10) >= 1  # a refused batch-mate may take it down: re-sent alone

    async def test_stop_is_safe_before_start_and_twice(self, world: SenderWorld) -> None:
        never = world.sender()
        await never.stop()
        sender = world.sender()
        await sender.start()
        await sender.stop()
        await sender.stop()
