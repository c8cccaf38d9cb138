"""The local stack: a real Kafka broker (KRaft) — or a cluster of them — and a private PostgreSQL
cluster.

`resolve_endpoints` is how every command finds Kafka and PostgreSQL: the settings win when they
name an existing cluster or server; otherwise the local stack is used if it runs.

Which local stack (:func:`state_dir`): ``SPECTRAL_STATE_DIR`` when set; else the nearest
``.spectral`` holding a stack in the working directory or one of its parents; else the stack
``spectral dev up`` started last (its state directory is remembered in
``$XDG_STATE_HOME/spectral/last-stack``, default ``~/.local/state``); else ``./.spectral``. So
``spectral dev status`` (or any command) finds a running stack from any directory. ``dev up``
never adopts the remembered stack: run in a checkout without one, it starts that checkout's own
(so ``make test`` in a second clone starts, and then stops, its own stack, never the first's).

The settings ``dev up`` prints (``eval "$(spectral dev up)"``) name the stack's own servers: a
``SPECTRAL_KAFKA_BOOTSTRAP`` that is the stack's broker address, a ``SPECTRAL_DATABASE_URL``
with its port and passfile, are recognised as the stack's, not as external servers — so
``dev up`` starts them again when they stopped, and ``dev status`` reports their processes.

Kafka is one broker unless ``up`` is asked for more (``spectral dev up --brokers 3``); a state
directory then keeps its broker count, and every other command finds the cluster it holds
(:func:`spectral.devstack.kafka_cluster.local_kafka`).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spectral.errors import ConfigurationError
from spectral.settings import Settings, socket_directory

if TYPE_CHECKING:
    from spectral.devstack.kafka import LocalKafka
    from spectral.devstack.kafka_cluster import LocalKafkaCluster
    from spectral.devstack.postgres import LocalPostgres


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: str
    database_url: str


@dataclass(frozen=True)
class StackStatus:
    kafka: str
    postgres: str
    orphans: tuple[str, ...] = ()
    """PostgreSQL clusters of stacks whose checkout is gone (``dev down --wipe`` removes them)."""


_STACK_FILES = ("postgres.json", "kafka")


def last_stack_file() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "spectral" / "last-stack"


def state_dir(settings: Settings, *, remembered: bool = True) -> Path:
    """The local stack's state directory (see the module docstring), absolute; without
    ``remembered`` the stack ``dev up`` started last elsewhere is not considered."""
    if "state_dir" in settings.model_fields_set:
        return settings.state_dir.resolve()
    name = settings.state_dir.name
    here = Path.cwd()
    for folder in (here, *here.parents):
        candidate = folder / name
        if any((candidate / part).exists() for part in _STACK_FILES):
            return candidate
    if remembered:
        try:
            last = Path(last_stack_file().read_text(encoding="utf-8").strip())
        except OSError:
            last = None
        if last is not None and last.is_absolute() and last.is_dir():
            return last
    return (here / name).resolve()


def _remember(directory: Path) -> None:
    path = last_stack_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{directory}\n", encoding="utf-8")
    except OSError:  # a read-only home only costs the convenience
        return


def _kafka(
    settings: Settings, *, remembered: bool = True, brokers: int | None = None
) -> LocalKafka | LocalKafkaCluster:
    from spectral.devstack.kafka_cluster import local_kafka  # noqa: PLC0415 - keeps imports light

    return local_kafka(state_dir(settings, remembered=remembered), settings.cache_dir, brokers)


def _postgres(settings: Settings, *, remembered: bool = True) -> LocalPostgres:
    from spectral.devstack.postgres import LocalPostgres  # noqa: PLC0415

    return LocalPostgres(state_dir(settings, remembered=remembered))


def owns_kafka(settings: Settings, *, remembered: bool = True) -> bool:
    """``SPECTRAL_KAFKA_BOOTSTRAP`` is unset, or is the local stack's own broker address."""
    if not settings.kafka_bootstrap:
        return True
    own = _kafka(settings, remembered=remembered).bootstrap
    return own is not None and _addresses(own) == _addresses(settings.kafka_bootstrap)


def owns_postgres(settings: Settings, *, remembered: bool = True) -> bool:
    """``SPECTRAL_DATABASE_URL`` is unset, or is the local stack's own server."""
    if settings.database_url is None:
        return True
    return _postgres(settings, remembered=remembered).owns(settings.database_url.get_secret_value())


def _addresses(bootstrap: str) -> frozenset[str]:
    return frozenset(part.strip() for part in bootstrap.split(",") if part.strip())


def up(settings: Settings, *, brokers: int | None = None) -> Endpoints:
    """Start what the settings do not already provide (idempotent) and return the endpoints;
    ``brokers`` sizes a new local Kafka (default 1; an existing one keeps its size). Settings
    that name the stack's own servers (what ``dev up`` printed) start them again if needed."""
    local_kafka = owns_kafka(settings, remembered=False)
    local_postgres = owns_postgres(settings, remembered=False)
    bootstrap = (
        _kafka(settings, remembered=False, brokers=brokers).ensure_running()
        if local_kafka
        else settings.kafka_bootstrap or ""
    )
    database_url = (
        _postgres(settings, remembered=False).ensure_running()
        if local_postgres
        else settings.database_url.get_secret_value()
        if settings.database_url
        else ""
    )
    if local_kafka or local_postgres:
        _remember(state_dir(settings, remembered=False))
    return Endpoints(bootstrap, database_url)


def database_up(settings: Settings) -> str:
    """Only the database: the settings' URL, else the local PostgreSQL, started if needed
    (idempotent; no broker is started — tests on spectral.testing's in-memory Kafka). A URL
    that names the stack's own server (what ``dev up`` printed) starts it again if needed."""
    if settings.database_url is not None and not owns_postgres(settings, remembered=False):
        return settings.database_url.get_secret_value()
    url = _postgres(settings, remembered=False).ensure_running()
    _remember(state_dir(settings, remembered=False))
    return url


def down(settings: Settings, *, wipe: bool = False) -> list[Path]:
    """Stop the local stack's processes (never an external cluster or server); ``wipe`` also
    deletes everything the stack created: Kafka's data, the PostgreSQL cluster (which lives
    outside the checkout, under /var/lib/spectral, when run as root) and the state directory —
    and the clusters there of stacks whose checkout is gone. Returns those it removed."""
    from spectral.devstack.postgres import orphans, wipe_orphan  # noqa: PLC0415

    directory = state_dir(settings)
    _kafka(settings).stop(wipe=wipe)
    _postgres(settings).stop(wipe=wipe)
    removed: list[Path] = []
    if wipe:
        for orphan in orphans():
            wipe_orphan(orphan)
            removed.append(orphan.root)
        shutil.rmtree(directory, ignore_errors=True)
        try:
            if Path(last_stack_file().read_text(encoding="utf-8").strip()) == directory:
                last_stack_file().unlink()
        except OSError:
            pass
    return removed


def status(settings: Settings) -> StackStatus:
    """One line per part saying what runs where (the stack's own servers described with their
    processes even when their settings are exported)."""
    from spectral.devstack.postgres import orphans  # noqa: PLC0415

    if not owns_kafka(settings):
        kafka = f"external at {settings.kafka_bootstrap}"
    else:
        kafka = _describe_kafka(_kafka(settings))
    if not owns_postgres(settings):
        postgres = "external (SPECTRAL_DATABASE_URL)"
    else:
        p = _postgres(settings).status()
        postgres = (
            f"running (pid {p.pid}) at 127.0.0.1:{p.port}{_socket_of(p.url)}, data {p.data_dir}, "
            f"log {p.log_file}"
            if p.running
            else f"stopped (data {p.data_dir}; `spectral dev up` starts it)"
        )
    lost = tuple(
        f"{o.root} (stack {o.state_dir} is gone"
        + (f"; server still running, pid {o.pid})" if o.pid is not None else ")")
        for o in orphans()
    )
    return StackStatus(kafka, postgres, lost)


def _socket_of(url: str | None) -> str:
    """Where the stack's URL connects when it is through the Unix-domain socket."""
    directory = socket_directory(url) if url else None
    return f" (the URL's socket in {directory})" if directory else ""


def _describe_kafka(local: LocalKafka | LocalKafkaCluster) -> str:
    from spectral.devstack.kafka_cluster import LocalKafkaCluster  # noqa: PLC0415

    k = local.status()
    nodes = local.node_status() if isinstance(local, LocalKafkaCluster) else []
    if not nodes:
        if not k.running:
            return "stopped"
        return f"running (pid {k.pid}) at {k.bootstrap}, Kafka {k.version}, log {k.log_file}"
    up_ = [n for n in nodes if n.running]
    down_ = [str(n.node_id) for n in nodes if not n.running]
    if not up_:
        return f"stopped ({len(nodes)} brokers)"
    health = "running" if not down_ else f"degraded, broker {', '.join(down_)} stopped:"
    pids = ", ".join(f"{n.node_id}: pid {n.pid}" for n in up_)
    return (
        f"{health} {len(up_)} of {len(nodes)} brokers ({pids}) at {k.bootstrap}, "
        f"Kafka {k.version}, logs {k.log_file}"
    )


def resolve_endpoints(settings: Settings) -> Endpoints:
    """The endpoints a command uses: from the settings, else the running local stack."""
    return Endpoints(resolve_kafka_bootstrap(settings), resolve_database_url(settings))


def resolve_kafka_bootstrap(settings: Settings) -> str:
    """Only Kafka (commands that never touch the database)."""
    if settings.kafka_bootstrap:
        return settings.kafka_bootstrap
    k = _kafka(settings).status()
    return _running(k.bootstrap if k.running else None, "Kafka", "SPECTRAL_KAFKA_BOOTSTRAP")


def resolve_database_url(settings: Settings) -> str:
    """Only the database (commands that never touch Kafka)."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    p = _postgres(settings).status()
    return _running(p.url if p.running else None, "PostgreSQL", "SPECTRAL_DATABASE_URL")


def _running(address: str | None, what: str, variable: str) -> str:
    if not address:
        raise ConfigurationError(
            f"no {what}: set {variable}, or start the local stack with `spectral dev up`"
        )
    return address
