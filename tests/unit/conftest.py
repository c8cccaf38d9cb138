"""Fixtures shared by the unit tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from spectral.devstack import kafka as kafka_module


@pytest.fixture
def listening(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A loopback port something listens on (and no patience waiting for it to be freed)."""
    monkeypatch.setattr(kafka_module, "_PORT_RELEASE", 0.2)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]
