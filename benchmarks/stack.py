"""The benchmark's slice of the real local stack: its own databases and topics, removed at the end.

Endpoints come from the settings or the running local stack (``spectral dev up``), exactly as
every spectral command finds them. Every database is cloned from one migrated template (cheap,
and every run starts from the same empty schema); topics carry a unique per-run prefix.
"""

from __future__ import annotations

import contextlib
import os
import socket
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


async def local_postmaster(database_url: str) -> int | None:
    """The PostgreSQL server's postmaster pid if it runs on this machine: the backend serving a
    connection is a local ``postgres`` process whose parent started when the server says it
    did (so a remote server whose backend pid happens to exist here is not taken for it)."""
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow("SELECT pg_backend_pid(), pg_postmaster_start_time()")
        assert row is not None
        backend, started = int(row[0]), row[1].timestamp()
        status = _proc_status(backend)  # while the backend lives: it exits with the connection
    finally:
        await conn.close()
    if status.get("Name") != "postgres" or "PPid" not in status:
        return None
    postmaster = int(status["PPid"])
    born = _started_at(postmaster)
    return postmaster if born is not None and abs(born - started) < 2.0 else None


def local_listener(bootstrap: str) -> int | None:
    """The pid of the process on this machine listening on the first bootstrap address's port
    (a loopback or local address), or None."""
    host, _, port = bootstrap.split(",", maxsplit=1)[0].rpartition(":")
    if host not in {"127.0.0.1", "localhost", "::1", socket.gethostname()}:
        return None
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == int(port):
                    inodes.add(fields[9])  # state 0A: LISTEN
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                if str(fd.readlink()) in wanted:
                    return int(proc.name)
    return None


def _proc_status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _started_at(pid: int) -> float | None:
    """A process's start as a UNIX time (field 22 of /proc/PID/stat, in ticks after boot)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
    except (OSError, StopIteration):
        return None
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def database_name(url: str) -> str:
    """The database a URL names (its path)."""
    return urlsplit(url).path.lstrip("/")


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
    shared: dict[str, object] = field(default_factory=dict)
    """What one stage prepared that a later one may reuse (the triage topic), by name."""

    @classmethod
    def resolve(cls) -> BenchStack:
        return cls(resolve_endpoints(load_settings()))

    async def servers(self) -> Servers:
        """The servers' pids, for CPU accounting: the local stack's, or — when the settings name
        servers by URL — those processes when they run on this machine (None: not here, so
        their CPU is not measured and reported as n/a)."""
        settings = load_settings()
        if settings.database_url is None:
            postmaster = LocalPostgres(settings.state_dir).status().pid
        else:
            postmaster = await local_postmaster(self.admin_url)
        if settings.kafka_bootstrap is None:
            kafka = LocalKafka(settings.state_dir, settings.cache_dir).status().pid
        else:
            kafka = local_listener(self.endpoints.kafka_bootstrap)
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

    def env(
        self, database_url: str, pythonpath: str | None = None, topic_prefix: str | None = None
    ) -> dict[str, str]:
        """Environment of a ``spectral`` subprocess working in this run's slice; ``pythonpath``
        runs it from another checkout's packages (A/B comparisons); ``topic_prefix`` replaces
        the run's prefix (a stage with topics of its own)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
        env.update(
            {
                "SPECTRAL_KAFKA_BOOTSTRAP": self.endpoints.kafka_bootstrap,
                "SPECTRAL_DATABASE_URL": database_url,
                "SPECTRAL_TOPIC_PREFIX": topic_prefix or self.topic_prefix,
                "SPECTRAL_LOG_FORMAT": "json",
                "SPECTRAL_STATE_DIR": str(Path(".spectral").resolve()),
            }
        )
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        return env

    async def drop(self, url: str) -> None:
        """Drop one database of the run as soon as its stage is done with it: autovacuum would
        otherwise go through its tables later, inside whatever stage runs then (DROP DATABASE
        also checkpoints, so its dirty pages are written now, not in the next measurement)."""
        await self._drop_database(database_name(url))

    async def settle(self) -> None:
        """Between stages: drop the databases the stage left (not the templates), so what it
        wrote is neither vacuumed nor checkpointed during the next stage's measurements."""
        templates = {self.template, *self.other_templates.values()}
        for name in [n for n in reversed(self.databases) if n not in templates]:
            await self._drop_database(name)

    async def _drop_database(self, name: str) -> None:
        await self._sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        with contextlib.suppress(ValueError):
            self.databases.remove(name)

    async def close(self) -> None:
        """Drop the run's databases and delete its topics (best effort)."""
        for name in list(reversed(self.databases)):
            with contextlib.suppress(Exception):
                await self._drop_database(name)
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
