"""Outages of the servers a process depends on, and the one place they are logged.

Every loop that waits out an outage (service.py), every readiness probe and the consumers' lag
measurement tell :data:`OUTAGES` when a call to a server fails for the infrastructure
(:meth:`Outages.failed`) and when one succeeds again (:meth:`Outages.recovered`). The log then
carries, per server, whatever the number of loops retrying meanwhile and however often:

* one WARNING ``outage started: waiting for the server`` (``component=database``) when the
  outage starts, with the first error;
* a WARNING ``outage continues`` every ``remind_every`` seconds while it lasts, with how long
  and how many calls failed;
* one INFO ``outage ended: the server answers again`` when it ends, with its duration.

The client libraries log through the standard library, on their own and at their own pace:
aiokafka writes an ERROR line for every failed connection and request (about 80 a second per
consumer while a broker is down). :class:`ClientLogThrottle`, a filter on the one handler
those lines take (logging.py), passes the first lines of each kind and counts the rest: a
reminder line every ``remind_every`` seconds says how many were held back, the ``outage
ended`` line says how many in all. While spectral knows the server is away, the client's lines
are warnings: the process waits, nothing is lost.

One client error is expected and passes: a new consumer group's first lookup of its coordinator
fails (``GroupCoordinatorNotAvailableError``) while the broker creates its offsets topic or loads
the group. aiokafka's ERROR line about it becomes one INFO line ``waiting for the consumer
group's coordinator``; only if the lookup still fails after ``COORDINATOR_GRACE`` seconds are its
lines errors again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from aiokafka.errors import CoordinatorLoadInProgressError, GroupCoordinatorNotAvailableError

from spectral.faults import describe
from spectral.observability.logging import get_logger

log = get_logger("spectral.outages")

REMIND_EVERY: Final = 60.0
"""Seconds between two reminders of an outage, and of the client lines held back."""

CLIENT_FAMILIES: Final = {"aiokafka": "kafka", "kafka": "kafka", "asyncpg": "database"}
"""Top-level logger names of the client libraries, and the server each one talks to."""

FIRST_LINES: Final = 3
"""Kinds of client line (logger and message template) shown per episode before the rest is
only counted."""

COORDINATOR_GRACE: Final = 60.0
"""Seconds a consumer group's coordinator may be missing before aiokafka's failed lookups of it
are errors again (a new cluster creates its offsets topic in a few seconds)."""

_COORDINATOR_LOOKUP: Final = (
    "aiokafka.consumer.group_coordinator",
    "Group Coordinator Request failed: %s",
)
"""aiokafka's line (logger, template) for a failed lookup of its group's coordinator."""
_NOT_THERE_YET: Final = (GroupCoordinatorNotAvailableError, CoordinatorLoadInProgressError)


@dataclass
class _Outage:
    since: float
    reminded_at: float
    failures: int = 0
    error: str = ""


class Outages:
    """The servers this process finds unavailable (see the module docstring); thread-safe."""

    def __init__(
        self,
        *,
        remind_every: float = REMIND_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.remind_every = remind_every
        self._clock = clock
        self._lock = threading.Lock()
        self._down: dict[str, _Outage] = {}
        self._throttles: list[ClientLogThrottle] = []

    def failed(self, component: str, error: BaseException | str, *, what: str = "") -> None:
        """A call to ``component`` failed for the infrastructure (``what``: which call)."""
        text = error if isinstance(error, str) else describe(error)
        now = self._clock()
        with self._lock:
            outage = self._down.get(component)
            if outage is None:
                self._down[component] = _Outage(now, now, failures=1, error=text)
                remind = None
            else:
                outage.failures += 1
                outage.error = text
                remind = now - outage.reminded_at >= self.remind_every
                if remind:
                    outage.reminded_at = now
                lasted, failures = now - outage.since, outage.failures
        if remind is None:
            log.warning(
                "outage started: waiting for the server",
                component=component,
                error=text,
                **({"operation": what} if what else {}),
            )
        elif remind:
            log.warning(
                "outage continues",
                component=component,
                for_seconds=round(lasted, 1),
                failures=failures,
                error=text,
                client_lines_held_back=self._held_back(component, reset=False),
            )

    def recovered(self, component: str) -> None:
        """A call to ``component`` succeeded: an outage of it, if any, has ended."""
        if component not in self._down:  # the common case, without the lock
            return
        with self._lock:
            outage = self._down.pop(component, None)
        if outage is None:
            return
        log.info(
            "outage ended: the server answers again",
            component=component,
            after_seconds=round(self._clock() - outage.since, 1),
            failures=outage.failures,
            client_lines_held_back=self._held_back(component, reset=True),
        )

    def down(self, component: str) -> bool:
        return component in self._down

    def attach(self, throttle: ClientLogThrottle) -> None:
        """Count ``throttle``'s held-back lines in this registry's reminders and end lines."""
        with self._lock:
            if throttle not in self._throttles:
                self._throttles.append(throttle)

    def _held_back(self, component: str, *, reset: bool) -> int:
        return sum(t.held_back(component, reset=reset) for t in list(self._throttles))


@dataclass
class _Episode:
    started: float
    last_seen: float
    reminded_at: float
    kinds: set[tuple[str, str]] = field(default_factory=set)
    held_back: int = 0
    """Since the last reminder."""
    total: int = 0


class ClientLogThrottle(logging.Filter):
    """Passes the first lines of each kind a client library logs at WARNING or above, counts
    the rest (see the module docstring). An episode ends when the outage of its server does
    (:meth:`Outages.recovered`) or after ``remind_every`` seconds without such a line."""

    def __init__(
        self,
        outages: Outages,
        *,
        first_lines: int = FIRST_LINES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._outages = outages
        self._first_lines = first_lines
        self._clock = clock
        self._lock = threading.Lock()
        self._episodes: dict[str, _Episode] = {}
        self._coordinator: _Episode | None = None
        outages.attach(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if self._coordinator_not_there_yet(record):
            return False
        family = record.name.split(".", 1)[0]
        component = CLIENT_FAMILIES.get(family)
        if component is None or record.levelno < logging.WARNING:
            return True
        if record.levelno > logging.WARNING and self._outages.down(component):
            record.levelno, record.levelname = logging.WARNING, "WARNING"  # waited out
        now = self._clock()
        remind = self._outages.remind_every
        kind = (record.name, str(record.msg))
        with self._lock:
            episode = self._episodes.get(family)
            if episode is None or now - episode.last_seen > remind:
                episode = self._episodes[family] = _Episode(now, now, now)
            episode.last_seen = now
            if kind in episode.kinds or len(episode.kinds) >= self._first_lines:
                episode.held_back += 1
                episode.total += 1
                if now - episode.reminded_at < remind:
                    return False
                held, episode.held_back, episode.reminded_at = episode.held_back, 0, now
                lasted = now - episode.started
            else:
                episode.kinds.add(kind)
                return True
        latest = record.getMessage()[:300]
        record.msg = "%s: %d similar lines held back in %d s (latest: %s)"
        record.args = (family, held, round(lasted), latest)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True

    def _coordinator_not_there_yet(self, record: logging.LogRecord) -> bool:
        """A failed lookup of a group coordinator that is not there yet, within its grace:
        logged once as INFO, by spectral (see the module docstring)."""
        if (record.name, record.msg) != _COORDINATOR_LOOKUP or not isinstance(record.args, tuple):
            return False
        error = next(iter(record.args), None)
        if not isinstance(error, _NOT_THERE_YET):
            return False
        now = self._clock()
        with self._lock:
            episode = self._coordinator
            if episode is None or now - episode.last_seen > COORDINATOR_GRACE:
                episode = self._coordinator = _Episode(now, now, now)
            first = episode.total == 0
            episode.last_seen = now
            episode.total += 1
            if now - episode.started > COORDINATOR_GRACE:
                return False  # it persists: aiokafka's line goes on, as the error it is
        if first:
            log.info(
                "waiting for the consumer group's coordinator: a new group's coordinator is not "
                "available until the broker has created it",
                error=type(error).__name__,
                grace_seconds=COORDINATOR_GRACE,
            )
        return True

    def reset(self) -> None:
        """Forget every episode (a new logging configuration starts afresh)."""
        with self._lock:
            self._episodes.clear()
            self._coordinator = None

    def held_back(self, component: str, *, reset: bool) -> int:
        """Lines of ``component``'s clients held back in the current episodes (in all of them;
        ``reset``: and end those episodes, so the next outage's first lines show again)."""
        families = [f for f, c in CLIENT_FAMILIES.items() if c == component]
        with self._lock:
            total = sum(self._episodes[f].total for f in families if f in self._episodes)
            if reset:
                for family in families:
                    self._episodes.pop(family, None)
        return total


OUTAGES: Final = Outages()
"""The process's registry: every loop, probe and measurement reports to it."""

CLIENT_THROTTLE: Final = ClientLogThrottle(OUTAGES)
"""The filter ``configure_logging`` puts on the handler the client libraries' lines take."""
