"""stop_consumer against the suite's broker: a consumer stops whole, however its stop ends."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer

from spectral.kafka.partitions import stop_consumer
from tests.support import no_task_left_since

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("group_id", [None, "stop-whole"])
async def test_a_stop_whose_caller_is_cancelled_still_stops_the_consumer_whole(
    kafka_bootstrap: str, topic_prefix: str, group_id: str | None
) -> None:
    # The caller of a stop is cancelled while it stops (a timeout around it, a second signal):
    # aiokafka's stop was interrupted after it marked the consumer closed, so its fetch loop,
    # connections and metadata task went on running in this process, and a second stop did
    # nothing. The cancellation still reaches the caller; the consumer still stops whole.
    before = set(asyncio.all_tasks())
    consumer = AIOKafkaConsumer(
        f"{topic_prefix}stop-whole",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id and f"{topic_prefix}{group_id}",
        enable_auto_commit=False,
    )
    await consumer.start()
    stopping = asyncio.create_task(stop_consumer(consumer))
    for _ in range(3):  # stop is under way: the coordinator closed, the fetcher not yet
        await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping

    await no_task_left_since(before)


async def test_a_coordinator_whose_close_raises_cancelled_still_leaves_nothing_running(
    kafka_bootstrap: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # aiokafka's group-less coordinator raised CancelledError out of its close when its task had
    # not begun; stop then skipped the fetcher and the client. Should it still happen (another
    # aiokafka, another event loop), what stop skipped is closed all the same.
    before = set(asyncio.all_tasks())
    consumer = AIOKafkaConsumer(f"{topic_prefix}stop-whole", bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    coordinator = consumer._coordinator
    close = coordinator.close

    async def close_then_raise() -> None:
        await close()
        raise asyncio.CancelledError

    monkeypatch.setattr(coordinator, "close", close_then_raise)
    await stop_consumer(consumer)
    await no_task_left_since(before)
