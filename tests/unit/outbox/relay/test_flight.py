"""A batch in flight: each row's outcome is its partition batch's (shared futures), its
refusal, or None (not sent)."""

from __future__ import annotations

import asyncio

from aiokafka.errors import MessageSizeTooLargeError, RequestTimedOutError

from spectral.outbox.relay.relay import _Flight


def test_a_flight_gives_every_row_its_batchs_outcome() -> None:
    async def run() -> list[object]:
        loop = asyncio.get_running_loop()
        took, failed = loop.create_future(), loop.create_future()
        refused = MessageSizeTooLargeError()
        flight = _Flight([], [took, failed, None, took, refused, failed], None, 0.0)
        took.set_result("ack")
        failed.set_exception(RequestTimedOutError())
        return await flight.results()

    results = asyncio.run(run())
    assert results[0] == results[3] == "ack"
    assert isinstance(results[1], RequestTimedOutError)
    assert results[1] is results[5]
    assert results[2] is None
    assert isinstance(results[4], MessageSizeTooLargeError)
