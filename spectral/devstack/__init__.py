"""The local stack: a real Kafka broker (KRaft) and a private PostgreSQL cluster.

`resolve_endpoints` is how every command finds Kafka and PostgreSQL: the settings win when they
name an existing cluster or server; otherwise the local stack is used if it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spectral.errors import ConfigurationError
from spectral.settings import Settings

if TYPE_CHECKING:
    from spectral.devstack.kafka import LocalKafka
    from spectral.devstack.postgres import LocalPostgres


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: str
    database_url: str


@dataclass(frozen=True)
class StackStatus:
    kafka: str
    postgres: str


def _kafka(settings: Settings) -> LocalKafka:
    from spectral.devstack.kafka import LocalKafka  # noqa: PLC0415 - keeps `import spectral` light

    return LocalKafka(settings.state_dir, settings.cache_dir)


def _postgres(settings: Settings) -> LocalPostgres:
    from spectral.devstack.postgres import LocalPostgres  # noqa: PLC0415

    return LocalPostgres(settings.state_dir)


def up(settings: Settings) -> Endpoints:
    """Start what the settings do not already provide (idempotent) and return the endpoints."""
    bootstrap = settings.kafka_bootstrap or _kafka(settings).ensure_running()
    database_url = (
        settings.database_url.get_secret_value()
        if settings.database_url
        else _postgres(settings).ensure_running()
    )
    return Endpoints(bootstrap, database_url)


def down(settings: Settings) -> None:
    """Stop the local stack's processes (never an external cluster or server)."""
    _kafka(settings).stop()
    _postgres(settings).stop()


def status(settings: Settings) -> StackStatus:
    """One line per part saying what runs where."""
    if settings.kafka_bootstrap:
        kafka = f"external at {settings.kafka_bootstrap}"
    else:
        k = _kafka(settings).status()
        kafka = (
            f"running (pid {k.pid}) at {k.bootstrap}, Kafka {k.version}, log {k.log_file}"
            if k.running
            else "stopped"
        )
    if settings.database_url:
        postgres = "external (SPECTRAL_DATABASE_URL)"
    else:
        p = _postgres(settings).status()
        postgres = (
            f"running (pid {p.pid}) at 127.0.0.1:{p.port}, data {p.data_dir}"
            if p.running
            else "stopped"
        )
    return StackStatus(kafka, postgres)


def resolve_endpoints(settings: Settings) -> Endpoints:
    """The endpoints a command uses: from the settings, else the running local stack."""
    return Endpoints(resolve_kafka_bootstrap(settings), resolve_database_url(settings))


def resolve_kafka_bootstrap(settings: Settings) -> str:
    """Only Kafka (commands that never touch the database)."""
    if settings.kafka_bootstrap:
        return settings.kafka_bootstrap
    k = _kafka(settings).status()
    if not k.running or not k.bootstrap:
        raise ConfigurationError(
            "no Kafka: set SPECTRAL_KAFKA_BOOTSTRAP, or start the local stack with "
            "`spectral dev up`"
        )
    return k.bootstrap


def resolve_database_url(settings: Settings) -> str:
    """Only the database (commands that never touch Kafka)."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    p = _postgres(settings).status()
    if not p.running or not p.url:
        raise ConfigurationError(
            "no PostgreSQL: set SPECTRAL_DATABASE_URL, or start the local stack with "
            "`spectral dev up`"
        )
    return p.url
