"""A readiness probe of the Kafka cluster for processes whose own clients may sit idle (the
outbox relay between batches): one metadata request, on a client of the probe's own, so the
answer never waits behind a publish the idempotent producer keeps retrying."""

from __future__ import annotations

import contextlib

from aiokafka.client import AIOKafkaClient

from spectral.kafka.config import client_kwargs
from spectral.settings import Settings


class KafkaProbe:
    """``await probe()`` returns once a broker answered a metadata request; raises otherwise.
    The client is made on first use and kept (its connections too)."""

    def __init__(self, settings: Settings, bootstrap: str, *, client_id: str) -> None:
        self._kwargs = {**client_kwargs(settings, bootstrap), "client_id": client_id}
        self._client: AIOKafkaClient | None = None

    async def __call__(self) -> None:
        if self._client is None:
            client = AIOKafkaClient(**self._kwargs)
            try:
                await client.bootstrap()
            except BaseException:
                with contextlib.suppress(Exception):
                    await client.close()
                raise
            self._client = client
            return
        await self._client.fetch_all_metadata()

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
