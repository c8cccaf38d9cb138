from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from spectral.lifecycle import STOP_SIGNALS, process_loop, stopping_on_signals


@pytest.mark.parametrize("sig", STOP_SIGNALS)
async def test_a_stop_signal_in_the_block_stops_and_the_handler_goes_with_the_block(
    sig: signal.Signals,
) -> None:
    stopped = asyncio.Event()
    with stopping_on_signals(stopped.set):
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(stopped.wait(), timeout=10)
    assert not asyncio.get_running_loop().remove_signal_handler(sig)  # none left installed


def test_a_loop_outside_the_main_thread_runs_the_block_without_signal_handlers() -> None:
    ran: list[bool] = []

    async def block() -> None:
        with stopping_on_signals(lambda: None):
            ran.append(True)

    thread = threading.Thread(target=asyncio.run, args=(block(),))
    thread.start()
    thread.join(timeout=10)
    assert ran == [True]


def test_a_consumer_process_runs_on_uvloop_and_stops_on_a_signal_there() -> None:
    """``spectral consume`` (and the engine's fault-test consumer) runs on uvloop, a dependency
    on every platform but Windows; a stop signal stops its block as on asyncio's loop."""
    factory = process_loop()
    assert factory is not None
    stopped: list[str] = []

    async def block() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        with stopping_on_signals(stop.set):
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(stop.wait(), timeout=10)
        stopped.append(type(loop).__module__)
        assert not loop.remove_signal_handler(signal.SIGTERM)

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(block())
    assert stopped == ["uvloop"]
