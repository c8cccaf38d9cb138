"""The benchmark's slice of the real local stack: its own databases and topics, removed at the end.

Endpoints come from the settings or the running local stack (``spectral dev up``), exactly as
every spectral command finds them. Every database is cloned from one migrated template (cheap,
and every run starts from the same empty schema); topics carry a unique per-run prefix.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from benchmarks.processes import Servers
from spectral.db.migrate import migrate
from spectral.devstack import Endpoints, resolve_endpoints
from spectral.devstack.kafka import LocalKafka
from spectral.devstack.postgres import LocalPostgres
from spectral.settings import load_settings


def with_database(url: str, database: str) -> str:
    """``url`` pointing at another database on the same server (query string kept)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


@dataclass
class BenchStack:
    endpoints: Endpoints
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    databases: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    template: str | None = None
    other_templates: dict[Path, str] = field(default_factory=dict)

    @classmethod
    def resolve(cls) -> BenchStack:
        return cls(resolve_endpoints(load_settings()))

    def servers(self) -> Servers:
        """The local stack's server pids, for CPU accounting (None where settings name an
        external server)."""
        settings = load_settings()
        postmaster = kafka = None
        if settings.database_url is None:
            postmaster = LocalPostgres(settings.state_dir).status().pid
        if settings.kafka_bootstrap is None:
            kafka = LocalKafka(settings.state_dir, settings.cache_dir).status().pid
        return Servers(postmaster, kafka)

    @property
    def topic_prefix(self) -> str:
        return f"bench-{self.run_id}."

    @property
    def admin_url(self) -> str:
        return with_database(self.endpoints.database_url, "postgres")

    async def database(self, label: str, migrations: Path | None = None) -> str:
        """A fresh, migrated database of its own; returns its URL. ``migrations``: another
        checkout's schemas/sql (an A/B run migrates the other side with its own migrations)."""
        template = await self._template(migrations)
        name = f"bench_{self.run_id}_{label}"
        await self._sql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        self.databases.append(name)
        return with_database(self.endpoints.database_url, name)

    async def _template(self, migrations: Path | None) -> str:
        if migrations is None and self.template is not None:
            return self.template
        if migrations is not None and migrations in self.other_templates:
            return self.other_templates[migrations]
        suffix = "template" if migrations is None else f"template{len(self.other_templates)}"
        name = f"bench_{self.run_id}_{suffix}"
        await self._sql(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        url = with_database(self.endpoints.database_url, name)
        if migrations is None:
            await migrate(url)
            self.template = name
        else:
            await migrate(url, migrations)
            self.other_templates[migrations] = name
        return name

    async def create_topic(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.endpoints.kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [
                    NewTopic(
                        name,
                        num_partitions=partitions,
                        replication_factor=1,
                        topic_configs=configs,
                    )
                ]
            )
        finally:
            await admin.close()
        self.topics.append(name)

    def env(self, database_url: str, pythonpath: str | None = None) -> dict[str, str]:
        """Environment of a ``spectral`` subprocess working in this run's slice; ``pythonpath``
        runs it from another checkout's packages (A/B comparisons)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
        env.update(
            {
                "SPECTRAL_KAFKA_BOOTSTRAP": self.endpoints.kafka_bootstrap,
                "SPECTRAL_DATABASE_URL": database_url,
                "SPECTRAL_TOPIC_PREFIX": self.topic_prefix,
                "SPECTRAL_LOG_FORMAT": "json",
                "SPECTRAL_STATE_DIR": str(Path(".spectral").resolve()),
            }
        )
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        return env

    async def close(self) -> None:
        """Drop the run's databases and delete its topics (best effort)."""
        for name in reversed(self.databases):
            with contextlib.suppress(Exception):
                await self._sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.databases.clear()
        if self.topics:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.endpoints.kafka_bootstrap)
            with contextlib.suppress(Exception):
                await admin.start()
                await admin.delete_topics(self.topics)
            with contextlib.suppress(Exception):
                await admin.close()
            self.topics.clear()

    async def _sql(self, statement: str) -> None:
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()
