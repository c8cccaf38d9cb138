"""What every CLI command shares: settings, logging, error reporting, running coroutines.

Importing it is light (typer and spectral's errors): a command's ``--help`` and a usage error
load neither pydantic nor the logging and metrics stack; :func:`settings` loads them.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

import typer

from spectral.errors import SpectralError

if TYPE_CHECKING:
    from spectral.observability.health import Health
    from spectral.settings import Settings

T = TypeVar("T")

EXIT_FAILURE = 1
EXIT_CONFIGURATION = 2
EXIT_UNAVAILABLE = 3


DEPLOYMENT_HELP = "The deployment: rule-candidates, work-executor, or one an installed plugin adds."
OFFSETS_METAVAR = "[TOPIC:]P:O[,...]"
TIMESTAMP_METAVAR = "RFC3339"


def offsets_option(flag: str, help_text: str) -> Any:
    """A ``--…-offset`` option: partition offsets, optionally per topic
    (spectral/replay/range.py)."""
    return typer.Option(flag, metavar=OFFSETS_METAVAR, help=help_text)


def timestamp_option(flag: str, help_text: str) -> Any:
    """A ``--…-timestamp`` option: an RFC 3339 time (spectral/replay/range.py)."""
    return typer.Option(flag, metavar=TIMESTAMP_METAVAR, help=help_text)


def deprecated_consumer_option() -> Any:
    """``--consumer NAME``: the spelling of the deployment before ``COMMAND NAME`` (hidden)."""
    return typer.Option("--consumer", hidden=True, help="Deprecated: give NAME instead.")


def deployment_name(name: str | None, consumer: str | None, command: str) -> str:
    """The deployment a command runs: its argument NAME, or the deprecated ``--consumer NAME``
    (with a warning on stderr; removed in the next minor release)."""
    if consumer is not None:
        if name is not None and name != consumer:
            raise typer.BadParameter(f"NAME is {name!r} but --consumer is {consumer!r}")
        typer.echo(
            f"warning: --consumer is deprecated and goes in the next release; write "
            f"`spectral {command} {consumer}`",
            err=True,
        )
        return consumer
    if name is None:
        raise typer.BadParameter(f"missing the deployment: spectral {command} NAME")
    return name


def settings() -> Settings:
    """The process settings, with logging configured from them (once per command); every
    installed plugin's settings section is checked too, so a bad value fails at start."""
    from spectral.observability.logging import configure_logging  # noqa: PLC0415 - see the module
    from spectral.plugins import settings_classes  # noqa: PLC0415
    from spectral.settings import load_settings  # noqa: PLC0415

    try:
        current = load_settings()
        for section in settings_classes():
            current.section(section)
    except ValueError as exc:  # pydantic ValidationError is a ValueError
        fail(f"invalid SPECTRAL_* settings: {exc}", EXIT_CONFIGURATION)
    configure_logging(current.log_level, current.log_format)
    return current


METRICS_PORT_HELP = "Serve /metrics, /healthz and /readyz on this port."
MAX_PORT: Final = 65535
"""The upper bound of every TCP port option (``min=0, max=MAX_PORT``): a usage error beyond."""
METRICS_HOST_HELP = "Interface for --metrics-port (default: SPECTRAL_METRICS_HOST, 127.0.0.1)."


def serve_health(current: Settings, port: int | None, host: str | None) -> Health:
    """The process's Health, served with its metrics on ``host:port`` when a port is given."""
    from spectral.observability.health import Health  # noqa: PLC0415 - see the module
    from spectral.observability.metrics import listening, serve_metrics  # noqa: PLC0415

    health = Health(
        liveness_timeout=current.liveness_timeout_seconds,
        call_timeout=current.not_ready_after_seconds,
    )
    try:
        server = serve_metrics(port, addr=host or current.metrics_host, health=health)
    except (OSError, OverflowError) as exc:
        fail(
            f"cannot serve metrics on {host or current.metrics_host}:{port}: {_why(exc)}",
            EXIT_CONFIGURATION,
        )
    if server is not None:
        bound_host, bound_port = server.server_address[:2]
        listening("metrics", str(bound_host), int(bound_port), paths="/metrics /healthz /readyz")
    return health


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` for a server command, bound before the server
    starts: a busy port or an address this machine does not have is a configuration error
    (exit 2, one line) — uvicorn would report it as a startup failure, exit 3."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
            sock.listen(2048)
        except BaseException:
            sock.close()
            raise
    except (OSError, OverflowError) as exc:
        fail(f"cannot listen on {host}:{port}: {_why(exc)}", EXIT_CONFIGURATION)
    sock.set_inheritable(True)
    return sock


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def warn_missing_topics(current: Settings, bootstrap: str, event_types: Iterable[str]) -> None:
    """Log a warning naming the topics (and dead-letter topics) of ``event_types`` that do not
    exist: `spectral topics apply` creates them with their settings; a broker that auto-creates
    topics would create them with its defaults on first use instead."""
    from spectral.kafka.topic_admin import missing_topics  # noqa: PLC0415 - only long-running commands
    from spectral.kafka.topics import dlq_topic, topic_for  # noqa: PLC0415
    from spectral.observability.logging import get_logger  # noqa: PLC0415

    names = [topic_for(t, current.topic_prefix) for t in event_types]
    try:
        missing = asyncio.run(missing_topics(current, bootstrap, [*names, *map(dlq_topic, names)]))
    except SpectralError:
        return  # Kafka unreachable: the command's own retries report it
    if missing:
        get_logger(__name__).warning(
            "topics missing: run `spectral topics apply` to create them with their settings",
            topics=missing,
        )


def summary(text: str) -> None:
    """A long-running command's closing summary for a person at a terminal, on stderr; not
    printed when the logs are JSON (its log's last line carries the same counts)."""
    from spectral.observability.logging import logs_are_json  # noqa: PLC0415 - see the module

    if not logs_are_json():
        typer.echo(text, err=True)


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Print ``message`` on stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def run(
    coro: Coroutine[Any, Any, T],
    *,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """Run a coroutine (on a loop of ``loop_factory``: asyncio's own when None); spectral
    errors propagate to ``main``, which reports them."""
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(coro)
    except KeyboardInterrupt:
        sys.exit(130)
