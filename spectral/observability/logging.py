"""structlog, configured once: JSON lines off a terminal, a readable console on one.

Context (the consumer's name) is bound with ``structlog.contextvars`` and merged into every
line. The ``redact_secrets`` processor masks anything that looks like a secret before a line is
rendered, so a password cannot leak through a log call by accident. The client libraries' lines
are throttled during outages (outages.py, ``ClientLogThrottle``).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, TextIO


@contextmanager
def _rich_unseen() -> Iterator[None]:
    """While structlog is first imported, ``import rich`` fails (when rich is not loaded yet).

    structlog imports rich, and with it attrs and pygments (~45 ms of CPU at every process's
    start, a ninth of a short command such as ``spectral dlq list``), for two things spectral's
    logging never reaches: the console renderer's default exception formatter
    (``format_exc_info`` below renders every exception as plain text before the renderer sees
    it) and the locals of ``dict_tracebacks``. Without rich structlog keeps its plain
    formatters; the lines spectral writes are the same (tests/unit/observability/
    test_logging.py). A process that loaded rich before (a help page, a table) gets structlog
    as it always did.
    """
    if "rich" in sys.modules or "structlog" in sys.modules:
        yield
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # then `import rich` fails
    try:
        yield
    finally:
        sys.modules.pop("rich", None)


with _rich_unseen():
    import structlog

_SECRET_KEYS = re.compile(
    r"(password|passwd|secret|token|api_key|apikey|authorization)", re.IGNORECASE
)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")
_MASK = "********"


def _mask(value: Any) -> Any:
    if isinstance(value, str):
        return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{_MASK}@", value)
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Mask secret-looking keys and passwords embedded in URLs."""
    for key, value in list(event_dict.items()):
        if _SECRET_KEYS.search(key) and value is not None:
            event_dict[key] = _MASK
        else:
            event_dict[key] = _mask(value)
    return event_dict


class _StderrLogger:
    """Writes each line to whatever ``sys.stderr`` is at that moment (not the stream that was
    current at configuration time, which a test harness or a daemonizer may have closed since)."""

    def msg(self, message: str) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


def _stderr_logger(*_args: Any) -> _StderrLogger:
    return _StderrLogger()


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The stdlib counterpart of ``_StderrLogger`` (aiokafka and asyncpg log through it)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        return


_JSON = False


def logs_are_json() -> bool:
    """Whether the configured logs are JSON lines (then a command prints no plain-text line on
    stderr: a container log that merges the streams stays parseable)."""
    return _JSON


def configure_logging(level: str = "INFO", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog and the stdlib root logger. Safe to call more than once.

    Lines of libraries that log through the standard library (aiokafka, asyncpg, uvicorn) take
    the same road as spectral's own: the same renderer (JSON with ``SPECTRAL_LOG_FORMAT=json``),
    the same keys (``timestamp``, ``level``, ``event``, plus ``logger``) and ``redact_secrets``;
    the Kafka and PostgreSQL clients' warnings and errors are throttled (outages.py).
    """
    out = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    global _JSON  # noqa: PLW0603 - one logging configuration per process
    _JSON = use_json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream) if stream else _stderr_logger,
        cache_logger_on_first_use=False,
    )
    from spectral.observability.outages import CLIENT_THROTTLE  # noqa: PLC0415 - imports this module

    handler = logging.StreamHandler(stream) if stream else _StderrHandler()
    CLIENT_THROTTLE.reset()
    handler.addFilter(CLIENT_THROTTLE)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                redact_secrets,
                renderer,
            ],
        )
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), handlers=[handler], force=True)
    logging.captureWarnings(capture=True)


def get_logger(name: str) -> Any:
    """A bound structlog logger named after its module."""
    return structlog.get_logger(name)
