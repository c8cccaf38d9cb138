"""Settings: one object built from ``SPECTRAL_*`` environment variables, extended by sections.

:class:`Settings` holds what the framework reads. A plugin (spectral's built-in features too)
keeps its own variables in a section, a :class:`PluginSettings` subclass with the same
``SPECTRAL_`` prefix, read with ``Section.of(settings)``: from the environment, with the
overrides ``load_settings(**overrides)`` was given, validated when first read (and by every
command at start, spectral/cli/_common.py). Nothing reads a ``SPECTRAL_*`` variable outside a
settings class.

Secrets (the database URL carries a password, the SASL password, an API token) are
``SecretStr`` so they never appear in a repr, a log line or a traceback. ``describe()`` gives a
printable view with them masked.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import SplitResult, parse_qs, quote, unquote, unquote_plus, urlsplit, urlunsplit

from pydantic import Field, PrivateAttr, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class KafkaTransport(StrEnum):
    """The Kafka client library consumers read with and dead letters are produced with."""

    AIOKAFKA = "aiokafka"
    CONFLUENT = "confluent"


class GroupProtocol(StrEnum):
    """The consumer group protocol of the confluent transport."""

    CLASSIC = "classic"
    CONSUMER = "consumer"


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


def _default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/spectral`, else `~/.cache/spectral`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spectral"


class Settings(BaseSettings):
    """Everything a spectral process reads from its environment."""

    # A refused value is not repeated in the error (it is printed): it may hold a secret (a
    # database URL's password).
    model_config = SettingsConfigDict(
        env_prefix="SPECTRAL_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    kafka_bootstrap: str | None = Field(
        default=None,
        description="host:port[,host:port]; unset = the local stack (`spectral dev up`).",
    )
    kafka_security_protocol: SecurityProtocol = Field(
        default=SecurityProtocol.PLAINTEXT, description="How clients connect to the brokers."
    )
    kafka_sasl_mechanism: SaslMechanism | None = Field(
        default=None, description="SASL mechanism, with a SASL security protocol."
    )
    kafka_sasl_username: str | None = Field(default=None, description="SASL user name.")
    kafka_sasl_password: SecretStr | None = Field(default=None, description="SASL password.")
    kafka_ca_file: Path | None = Field(
        default=None,
        description="CA bundle to verify the brokers' TLS certificates; unset = the system's CAs.",
    )
    kafka_request_timeout_ms: int = Field(
        default=15_000,
        ge=1_000,
        description="How long any Kafka request may go unanswered before the client drops the "
        "connection and asks again (producers are idempotent: no duplicate). Bounds how long a "
        "frozen broker stalls a process; keep it above the consumer group's 10 s rebalance "
        "timeout.",
    )
    kafka_transport: KafkaTransport = Field(
        default=KafkaTransport.AIOKAFKA,
        description="The Kafka client consumers read with and produce dead letters with, the "
        "outbox relay publishes with and dlq redrive produces with: aiokafka (asyncio, the "
        "classic group protocol) or confluent (librdkafka, with the broker-driven group "
        "protocol of Kafka 4: see kafka_group_protocol).",
    )
    kafka_group_protocol: GroupProtocol = Field(
        default=GroupProtocol.CONSUMER,
        description="The confluent transport's group protocol: consumer (KIP-848: the broker "
        "moves only the partitions that must move; Kafka 4.0 or later) or classic (the "
        "cooperative-sticky assignor). aiokafka always speaks classic.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="postgresql://user:password@host:port/db, or through a Unix-domain socket "
        "postgresql://user@/db?host=/socket/directory&port=5432 (percent-encode '@', ':', '/', "
        "'?', '#', '&', '[' and ']' in the user, the password, the database and values); unset "
        "= the local stack.",
    )
    operator_database_url: SecretStr | None = Field(
        default=None,
        description="Login used by `spectral triage` (operator role); unset = database_url "
        "with the spectral_operator role assumed.",
    )
    api_token: SecretStr | None = Field(
        default=None,
        description="The API token `spectral mcp` acts with over stdio (checked at start and on "
        "every call); unused elsewhere.",
    )
    topic_prefix: str = Field(default="", description="Prepended to every topic name.")
    state_dir: Path = Field(default=Path(".spectral"), description="Local stack state.")
    cache_dir: Path = Field(default_factory=_default_cache_dir, description="Kafka jars cache.")
    kafka_metadata_refresh_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often consumers re-read the cluster's metadata: new topics, re-created "
        "topics and added partitions are picked up within this time (Kafka's default is 5 min).",
    )
    consumer_idle_in_transaction_seconds: float = Field(
        default=10.0,
        ge=0,
        description="A consumer's database session idle this long inside a batch transaction "
        "(its process frozen or hung) is ended by PostgreSQL, so the member that takes over its "
        "partitions waits at most this long on its dedup rows; 0 disables.",
    )
    consumer_lock_timeout_seconds: float = Field(
        default=15.0,
        ge=0,
        description="A batch statement waiting longer than this on a lock fails and the batch "
        "is retried with backoff (a visible, counted retry instead of a silent wait); 0 disables.",
    )
    log_level: str = Field(
        default="INFO", description="DEBUG | INFO | WARNING | ERROR: the least severe level logged."
    )
    log_format: str = Field(
        default="auto",
        description="auto | json | console: auto writes JSON lines off a terminal and readable "
        "lines on one; with json every line is JSON, aiokafka's, asyncpg's and uvicorn's included.",
    )
    topic_partitions: int = Field(
        default=3, ge=1, description="Partitions of each topic `spectral topics apply` creates."
    )
    topic_replication_factor: int | None = Field(
        default=None, ge=1, description="Replicas per partition; unset = min(3, brokers)."
    )
    topic_retention_ms: int = Field(
        default=7 * 24 * 3600 * 1000,
        ge=-1,
        description="How long event topics keep records (the replay window; -1 = forever).",
    )
    dlq_retention_ms: int = Field(
        default=30 * 24 * 3600 * 1000,
        ge=-1,
        description="How long dead-letter topics keep records (-1 = forever).",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="Interface of the --metrics-port endpoint (/metrics, /healthz, /readyz); "
        "0.0.0.0 in a container.",
    )
    metrics_pushgateway: str | None = Field(
        default=None,
        description="A Prometheus Pushgateway (host:port or URL) that a one-shot `spectral "
        "maintenance` (a CronJob, which nothing scrapes) pushes its spectral_* series to when "
        "it ends, as job spectral-maintenance; unset: no push.",
    )
    liveness_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="/healthz fails once the event loop made no progress for this long.",
    )
    not_ready_after_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A call to Kafka or PostgreSQL unanswered this long (a publish the producer "
        "keeps retrying, a statement on a frozen server) makes the process not ready (/readyz "
        "503, spectral_ready 0) until it returns.",
    )
    lag_interval_seconds: float = Field(
        default=10.0, gt=0, description="How often a consumer measures its lag per partition."
    )
    stall_after_seconds: float = Field(
        default=120.0,
        gt=0,
        description="A partition whose committed offset stayed put this long while its end "
        "offset grew is stalled (metric and log line).",
    )

    # -- bounded state (issue 14: `spectral maintenance`) ---------------------------------------
    outbox_retention_seconds: float = Field(
        default=86_400.0,
        gt=0,
        description="Published outbox rows are kept at least this long after publication.",
    )
    dedup_min_horizon_seconds: float = Field(
        default=0.0,
        ge=0,
        description="Dedup keys are kept at least this long, whatever the topics' retention "
        "(a replay window promised beyond what the broker keeps).",
    )
    dedup_grace_seconds: float = Field(
        default=600.0,
        ge=0,
        description="Added to the broker's bound on how long a record stays readable (clock "
        "differences, fetch buffers, producer retries).",
    )
    dead_letter_table_retention_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Rows of core.dead_letters (dead letters the broker refused even as a "
        "reference) are pruned this long after they were recorded; unset = as long as the "
        "dead-letter topics keep their records (SPECTRAL_DLQ_RETENTION_MS; -1: for ever).",
    )
    token_retention_seconds: float = Field(
        default=90 * 86_400.0,
        gt=0,
        description="API tokens revoked or expired longer ago than this are deleted (the audit "
        "trail keeps the names they acted under).",
    )
    maintenance_lock_timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        description="How long a rotation waits for transactions in flight on a table; writers "
        "wait behind it at most this long.",
    )

    @field_validator("database_url", "operator_database_url")
    @classmethod
    def _socket_path_fits(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_url(value.get_secret_value())
        return value

    @field_validator("topic_prefix")
    @classmethod
    def _topic_prefix_is_legal(cls, value: str) -> str:
        allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        if not set(value) <= allowed:
            raise ValueError("topic_prefix may contain only letters, digits, '.', '_' and '-'")
        return value

    def describe(self) -> dict[str, Any]:
        """A printable view of the settings with every secret masked."""
        view = self.model_dump(mode="json")
        for name in ("database_url", "operator_database_url"):
            secret = getattr(self, name)
            view[name] = redact_url(secret.get_secret_value()) if secret else None
        for name in ("kafka_sasl_password", "api_token"):
            if getattr(self, name) is not None:
                view[name] = "********"
        return view

    def replace(self, **overrides: Any) -> Settings:
        """These settings with ``overrides`` (framework fields and sections' alike)."""
        framework = {k: v for k, v in overrides.items() if k in type(self).model_fields}
        copy = self.model_copy(update=framework)
        copy._overrides = {**self._overrides, **overrides}  # noqa: SLF001 - its own class
        copy._sections = {}  # noqa: SLF001
        return copy

    _overrides: dict[str, Any] = PrivateAttr(default_factory=dict)
    _sections: dict[type[Any], Any] = PrivateAttr(default_factory=dict)

    def section(self, kind: type[S]) -> S:
        """The settings section ``kind``: its variables from the environment, with the overrides
        these settings were loaded with (cached; ValueError when a value is invalid)."""
        found = self._sections.get(kind)
        if found is None:
            found = kind(**{k: v for k, v in self._overrides.items() if k in kind.model_fields})
            self._sections[kind] = found
        return found


class PluginSettings(BaseSettings):
    """A settings section: a plugin's own ``SPECTRAL_*`` variables (declare it in the plugin's
    ``settings``; read it with ``MySettings.of(settings)``)."""

    # A refused value is not repeated in the error (it is printed): it may hold a secret (a
    # database URL's password).
    model_config = SettingsConfigDict(
        env_prefix="SPECTRAL_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    @classmethod
    def of(cls, settings: Settings) -> Self:
        """This section of ``settings`` (the environment plus its overrides)."""
        return settings.section(cls)


S = TypeVar("S", bound=PluginSettings)


# The query parameters asyncpg and libpq read a secret from: the password, and the passphrase of
# the client's TLS key.
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
# What urlsplit (and asyncpg's urlparse) drop from anywhere in a URL before reading it.
_DROPPED_FROM_URLS = str.maketrans("", "", "\t\r\n")


def _masked_query(query: str) -> str:
    """``query`` with the value of each secret parameter (its name read as asyncpg and libpq
    read it: percent-decoded) replaced with asterisks."""
    fields = query.split("&")
    for at, field in enumerate(fields):
        name, sep, _ = field.partition("=")
        if sep and unquote_plus(name) in _SECRET_PARAMETERS:
            fields[at] = f"{name}=********"
    return "&".join(fields)


def redact_url(url: str) -> str:
    """Replace the password of a URL with asterisks, in its netloc and in its query (a socket
    URL has no host to write ``user:password@`` before; asyncpg and libpq read ``password=``),
    and the client key's ``sslpassword``. A URL that cannot be read as a PostgreSQL URL is not
    shown at all: where a secret ends in it is not known."""
    url = url.translate(_DROPPED_FROM_URLS)  # as read: the query's offsets below are the text's
    try:
        parts = _readable(url)
    except ValueError:
        return "(a database URL that cannot be read)"
    query = _masked_query(parts.query)
    if query != parts.query:
        # the first "?" starts the query (urlsplit ends the netloc and the path there)
        head, _, rest = url.partition("?")
        url = f"{head}?{query}{rest[len(parts.query) :]}"
        parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":********"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


# -- PostgreSQL URLs over TCP or a Unix-domain socket ------------------------------------------
# A URL that names no host and carries a directory in its ``host`` parameter connects through
# the server's Unix-domain socket in that directory (``<dir>/.s.PGSQL.<port>``), the form both
# asyncpg and libpq read: ``postgresql://user@/db?host=/var/run/postgresql&port=5432``. The
# netloc must name neither host nor port: asyncpg reads the ``host`` parameter only when it does
# not (``user@:5432`` counts as naming the empty host). On one machine a socket saves the TCP
# loopback's work on both sides of every round trip; the local stack's URL uses it, any other
# URL keeps whatever transport it names.
#
# A socket's path is limited by the operating system (108 bytes with its terminating NUL on
# Linux); :func:`check_socket_path` says so clearly instead of leaving the driver to fail on
# every connection attempt, which would read as a database outage.
#
# The URL is read as asyncpg reads it (``connect_utils``): the hosts of the netloc, else of the
# last ``host`` parameter; their ports, else the last ``port`` parameter's, else ``PGPORT``'s,
# else 5432; every port read with ``int()``.

SOCKET_PATH_MAX = 107
"""Longest Unix-domain socket path in bytes (``sun_path`` is 108 bytes, NUL included)."""

_SOCKET_FILE_STEM = ".s.PGSQL."
_SOCKET_FILE = _SOCKET_FILE_STEM + "{port}"
_DEFAULT_PORT = 5432
_SCHEMES = frozenset({"postgresql", "postgres"})
_UNREADABLE = (
    "the database URL cannot be read{what}: write it as postgresql://user:password@host:port/db"
    "?parameter=value, with each '@', ':', '/', '?', '#', '&', '[' and ']' in the user, the "
    "password, the database and a value percent-encoded (%40, %3A, %2F, %3F, %23, %26, %5B, %5D)"
)


def _unreadable(what: str = "") -> ValueError:
    """The error for a URL that cannot be read; it never quotes the URL (nor so a password)."""
    return ValueError(_UNREADABLE.format(what=what))


def _split(url: str) -> SplitResult:
    """``urlsplit(url)``, with an error that does not quote the URL."""
    try:
        return urlsplit(url)
    except ValueError:
        raise _unreadable(" ('[' or ']' outside an IPv6 address)") from None


def _readable(url: str) -> SplitResult:
    """The parts of ``url``; ValueError when asyncpg would not read it as written, or would read
    a password as something else (a host, a port, the database, the query, a fragment)."""
    parts = _split(url)
    text = url.translate(_DROPPED_FROM_URLS).lstrip()
    if parts.scheme not in _SCHEMES or not text.lower().startswith(f"{parts.scheme}://"):
        raise _unreadable(" (it must start with postgresql:// or postgres://)")
    if "@" in parts.path:
        raise _unreadable(" (an '@' after the host)")
    if "#" in text:
        raise _unreadable(" (a '#')")
    if parts.query:
        try:
            parse_qs(parts.query, strict_parsing=True)
        except ValueError:
            raise _unreadable(" (a parameter without '=')") from None
    _hosts(parts)  # the ports
    return parts


def _port(text: str) -> int | None:
    """A port as asyncpg reads it (``int()``: a sign, spaces and digit groups allowed), or None."""
    try:
        return int(text)
    except ValueError:
        return None


def _ports(text: str) -> list[int]:
    """A comma-separated list of ports (none when empty)."""
    if not text:
        return []
    ports = [_port(p) for p in text.split(",")]
    if None in ports:
        raise _unreadable(" (a port that is not a number)")
    return [p for p in ports if p is not None]


def _pick(ports: list[int], at: int) -> int | None:
    """The port of the ``at``-th host: one port for all, or one each."""
    if not ports:
        return None
    return ports[at] if len(ports) > 1 and at < len(ports) else ports[0]


def _parameters(parts: SplitResult) -> dict[str, str]:
    """The URL's query parameters, each the last of its name (as asyncpg reads them)."""
    return {name: values[-1] for name, values in parse_qs(parts.query).items()}


def _hosts(parts: SplitResult) -> list[tuple[str, int | None]]:
    """The hosts a URL connects to, in the order asyncpg tries them, each with the port the URL
    names for it (None: the default): the netloc's comma-separated hosts (percent-decoded), or
    else the last ``host`` parameter's with the last ``port`` parameter's ports. A socket host
    is its directory (or the socket file, when it names one)."""
    query = _parameters(parts)
    # asyncpg splits the netloc at its first "@"; a host named there hides the parameters
    hostspec = parts.netloc.partition("@")[2] if "@" in parts.netloc else parts.netloc
    in_netloc = bool(hostspec)
    given = [] if in_netloc else _ports(query.get("port", ""))
    hostlist = hostspec or query.get("host", "")
    hosts: list[tuple[str, int | None]] = []
    for at, spec in enumerate(hostlist.split(",") if hostlist else []):
        if spec.startswith("/"):
            addr, port = spec, ""
        elif spec.startswith("["):
            addr, _, rest = spec[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            addr, _, port = spec.partition(":")
        if in_netloc:
            addr, port = unquote(addr), unquote(port)
        if given:  # asyncpg reads the port parameter first, and then no host's port
            hosts.append((addr, _pick(given, at)))
        elif port:
            hosts.append((addr, _ports(port)[0]))
        else:
            hosts.append((addr, None))
    return hosts


def _or(port: int | None, default: int | None) -> int | None:
    """``port``, or ``default`` when the URL names none (0 is a port)."""
    return default if port is None else port


def _default_ports() -> list[int]:
    """The ports of ``PGPORT`` (asyncpg's default when a URL names none), else 5432."""
    try:
        return _ports(os.environ.get("PGPORT", "")) or [_DEFAULT_PORT]
    except ValueError:
        return [_DEFAULT_PORT]  # asyncpg refuses it: no socket is reached


def socket_paths(url: str) -> list[str]:
    """The Unix-domain socket files ``url`` connects through (none: TCP only). A socket host that
    names the file itself (it holds ``.s.PGSQL.``) is that file, as asyncpg reads it."""
    defaults = _default_ports()
    return [
        addr if _SOCKET_FILE_STEM in addr else socket_path(addr, _or(port, _pick(defaults, at)))
        for at, (addr, port) in enumerate(_hosts(_split(url)))
        if addr.startswith("/")
    ]


def socket_directory(url: str) -> str | None:
    """The directory of the Unix-domain socket ``url`` connects through when that socket is its
    only host, or None (TCP, a list of hosts, or a URL that cannot be read)."""
    try:
        hosts = _hosts(_split(url))
    except ValueError:
        return None
    if len(hosts) == 1 and hosts[0][0].startswith("/"):
        [(addr, _)] = hosts
        return os.path.dirname(addr) if _SOCKET_FILE_STEM in addr else addr  # noqa: PTH120
    return None


def url_port(url: str) -> int | None:
    """The port ``url`` names for its (first) host, in its netloc or in its ``port`` parameter
    (None: the default, or a URL that cannot be read)."""
    try:
        parts = _split(url)
        hosts = _hosts(parts)
        if hosts:
            return hosts[0][1]
        return _pick(_ports(_parameters(parts).get("port", "")), 0)
    except ValueError:
        return None


def socket_path(directory: str | Path, port: int | None) -> str:
    """The socket file of the server listening on ``port`` in ``directory``."""
    # As spelled (asyncpg's os.path.join), not normalized as Path would: the system limits the
    # path it is given, "." components and repeated slashes included.
    name = _SOCKET_FILE.format(port=_DEFAULT_PORT if port is None else port)  # 0 is a port
    return os.path.join(directory, name)  # noqa: PTH118


def check_socket_path(directory: str | Path, port: int | None) -> None:
    """Raise ValueError when the socket's path is longer than the system allows."""
    _check_path(socket_path(directory, port))


def _check_path(path: str) -> None:
    size = len(os.fsencode(path))  # the bytes the system gets (a name need not be UTF-8)
    if size > SOCKET_PATH_MAX:
        msg = (
            f"the Unix-domain socket path {path!r} is {size} bytes; the system allows "
            f"{SOCKET_PATH_MAX}: use a shorter socket directory, or a TCP host"
        )
        raise ValueError(msg)


def check_url(url: str) -> None:
    """Raise ValueError when ``url`` cannot be read as asyncpg reads it, or names a
    Unix-domain socket whose path is too long."""
    _readable(url)
    for path in socket_paths(url):
        _check_path(path)


def socket_url(user: str, directory: str | Path, port: int, database: str, **query: str) -> str:
    """``postgresql://user@/database?host=directory&port=port&...``: a socket connection."""
    check_socket_path(directory, port)
    params = "".join(f"&{k}={quote(v, safe='/')}" for k, v in query.items())
    host = quote(str(directory), safe="/")
    return f"postgresql://{user}@/{database}?host={host}&port={port}{params}"


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment, with explicit overrides winning; an override
    that is not the framework's is kept for the section that reads it."""
    current = Settings(**{k: v for k, v in overrides.items() if k in Settings.model_fields})
    current._overrides = dict(overrides)  # noqa: SLF001 - its own class's state
    return current
