"""Log volume is bounded by state changes, not by retries: an outage is one line when it
starts, a reminder with a count now and then, one line when it ends; the client libraries'
own lines are passed once per kind and counted after that."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    GroupCoordinatorNotAvailableError,
    NotCoordinatorError,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from spectral.observability.outages import (
    COORDINATOR_GRACE,
    FIRST_LINES,
    ClientLogThrottle,
    Outages,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    """Collects what passes the throttle, as the process's one handler would write it."""

    def __init__(self, throttle: ClientLogThrottle) -> None:
        super().__init__(logging.DEBUG)
        self.addFilter(throttle)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as logs:
        yield logs


def _client_logger(name: str, handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger


def test_an_outage_is_logged_when_it_starts_now_and_then_and_when_it_ends(
    captured: list[MutableMapping[str, Any]],
) -> None:
    clock = Clock()
    outages = Outages(remind_every=60, clock=clock)
    for _ in range(500):  # a retry every 0.25 s for 125 s
        outages.failed("kafka", ConnectionRefusedError("refused"), what="publish")
        clock.now += 0.25
    outages.recovered("kafka")
    outages.recovered("kafka")  # no outage any more: nothing to say

    events = [(line["event"], line["log_level"]) for line in captured]
    assert events == [
        ("outage started: waiting for the server", "warning"),
        ("outage continues", "warning"),
        ("outage continues", "warning"),
        ("outage ended: the server answers again", "info"),
    ]
    assert captured[0]["component"] == "kafka"
    assert captured[0]["operation"] == "publish"
    assert "ConnectionRefusedError" in captured[0]["error"]
    assert captured[-1]["failures"] == 500
    assert captured[-1]["after_seconds"] == 125.0
    assert not outages.down("kafka")


def test_servers_have_outages_of_their_own(captured: list[MutableMapping[str, Any]]) -> None:
    outages = Outages(clock=Clock())
    outages.failed("database", OSError("gone"))
    outages.failed("kafka", OSError("gone"))
    outages.failed("database", OSError("still gone"))
    outages.recovered("database")
    assert outages.down("kafka")
    assert [(line["event"][:14], line["component"]) for line in captured] == [
        ("outage started", "database"),
        ("outage started", "kafka"),
        ("outage ended: ", "database"),
    ]


def test_client_lines_pass_once_per_kind_and_are_counted_after_that(
    captured: list[MutableMapping[str, Any]],
) -> None:
    clock = Clock()
    outages = Outages(remind_every=60, clock=clock)
    throttle = ClientLogThrottle(outages, clock=clock)
    lines = Lines(throttle)
    client = _client_logger("aiokafka", lines)
    fetcher = _client_logger("aiokafka.consumer.fetcher", lines)
    for second in range(60):
        for _ in range(80):  # aiokafka's pace during a broker outage
            client.error("Unable connect to node with id %s: %s", 1, f"refused at {second}")
            fetcher.error("Failed fetch messages from %s: %s", 1, "NodeNotReadyError")
        clock.now += 1
    client.error("Unable connect to node with id %s: %s", 1, "refused")  # 60 s on: a reminder
    assert [r.getMessage()[:40] for r in lines.records] == [
        "Unable connect to node with id 1: refuse",
        "Failed fetch messages from 1: NodeNotRea",
        "aiokafka: 9599 similar lines held back i",
    ]
    assert lines.records[-1].levelno == logging.WARNING
    # The outage's end says how many were held back in all, and the next outage shows its first
    # lines again.
    outages.failed("kafka", OSError("refused"))
    outages.recovered("kafka")
    assert captured[-1]["client_lines_held_back"] == 9599
    client.error("Unable connect to node with id %s: %s", 1, "refused")
    assert len(lines.records) == 4


def test_while_spectral_waits_out_an_outage_the_clients_errors_are_warnings() -> None:
    clock = Clock()
    outages = Outages(clock=clock)
    lines = Lines(ClientLogThrottle(outages, clock=clock))
    client = _client_logger("asyncpg.pool", lines)
    client.error("connection lost before the outage is known")
    outages.failed("database", OSError("refused"))
    client.error("connection lost during the outage")
    assert [r.levelname for r in lines.records] == ["ERROR", "WARNING"]
    kafka = _client_logger("aiokafka.producer", lines)
    kafka.error("a Kafka line while only the database is away")
    assert lines.records[-1].levelname == "ERROR"


def test_a_new_groups_coordinator_is_waited_for_in_one_info_line_an_error_if_it_persists(
    captured: list[MutableMapping[str, Any]],
) -> None:
    clock = Clock()
    lines = Lines(ClientLogThrottle(Outages(clock=clock), clock=clock))
    coordinator = _client_logger("aiokafka.consumer.group_coordinator", lines)

    def lookup_fails(error: Exception, seconds: float) -> None:
        for _ in range(int(seconds / 0.5)):  # aiokafka tries again every 0.5 s
            coordinator.error("Group Coordinator Request failed: %s", error)
            clock.now += 0.5

    lookup_fails(GroupCoordinatorNotAvailableError(), 20)  # the broker creates its offsets topic
    lookup_fails(CoordinatorLoadInProgressError(), 5)  # then loads the group's partition
    assert lines.records == []
    assert [(line["log_level"], line["error"]) for line in captured] == [
        ("info", "GroupCoordinatorNotAvailableError")
    ]
    assert "waiting for the consumer group's coordinator" in captured[0]["event"]

    lookup_fails(GroupCoordinatorNotAvailableError(), COORDINATOR_GRACE)  # it persists
    assert lines.records
    assert {(r.levelname, r.getMessage()) for r in lines.records} == {
        ("ERROR", "Group Coordinator Request failed: [Error 15] GroupCoordinatorNotAvailableError")
    }
    assert len(captured) == 1

    clock.now += COORDINATOR_GRACE + 1  # found: a later lookup has its grace again
    lines.records.clear()
    lookup_fails(GroupCoordinatorNotAvailableError(), 2)
    assert lines.records == []
    assert len(captured) == 2


def test_other_failed_coordinator_lookups_stay_errors() -> None:
    clock = Clock()
    lines = Lines(ClientLogThrottle(Outages(clock=clock), clock=clock))
    coordinator = _client_logger("aiokafka.consumer.group_coordinator", lines)
    coordinator.error("Group Coordinator Request failed: %s", NotCoordinatorError())
    coordinator.error("Heartbeat failed: %r", GroupCoordinatorNotAvailableError())
    assert [r.levelname for r in lines.records] == ["ERROR", "ERROR"]


def test_other_loggers_and_lower_levels_pass_untouched() -> None:
    clock = Clock()
    lines = Lines(ClientLogThrottle(Outages(clock=clock), clock=clock))
    uvicorn = _client_logger("uvicorn.error", lines)
    info = _client_logger("aiokafka.info", lines)
    for _ in range(50):
        uvicorn.error("same line")
        info.info("same info line")
    assert len(lines.records) == 100


def test_after_a_quiet_spell_a_kind_shows_again() -> None:
    clock = Clock()
    lines = Lines(ClientLogThrottle(Outages(remind_every=60, clock=clock), clock=clock))
    client = _client_logger("aiokafka", lines)
    client.error("Unable connect to node with id %s", 1)
    client.error("Unable connect to node with id %s", 1)
    clock.now += 61
    client.error("Unable connect to node with id %s", 1)
    assert len(lines.records) == 2


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=5), st.integers(min_value=0, max_value=40)),
        min_size=1,
        max_size=400,
    )
)
def test_lines_are_bounded_by_time_not_by_volume(steps: list[tuple[float, int]]) -> None:
    """Whatever the pace and the variety of the client's lines, at most the first few kinds
    pass per episode, plus one reminder a minute."""
    clock = Clock()
    lines = Lines(ClientLogThrottle(Outages(remind_every=60, clock=clock), clock=clock))
    client = _client_logger("aiokafka.hypothesis", lines)
    start = clock.now
    sent = 0
    for pause, kind in steps:
        clock.now += pause
        client.error(f"kind {kind} %s", sent)
        sent += 1
    minutes = math.floor((clock.now - start) / 60) + 1
    assert len(lines.records) <= minutes * (FIRST_LINES + 1)
    assert len(lines.records) <= sent
