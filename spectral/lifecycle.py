"""How a long-running process of spectral stops: on SIGTERM or SIGINT it finishes what is in
flight and returns (the consumer engine, the outbox relay, the maintenance and cluster loops)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Final

STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stopping_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGTERM or SIGINT while the block runs, and restore the signals'
    default handling after it. Where the running loop cannot take signal handlers (a thread
    other than the main one, a platform without them) nothing is installed: the caller's own
    ``stop()`` still ends the block."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
