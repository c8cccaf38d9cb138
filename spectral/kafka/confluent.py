"""The confluent transport (``SPECTRAL_KAFKA_TRANSPORT=confluent``): librdkafka through
confluent-kafka, behind the same seam as aiokafka (spectral.kafka.transport).

The consumer group protocol is ``SPECTRAL_KAFKA_GROUP_PROTOCOL``: ``consumer`` (KIP-848, Kafka
4.0 or later: the broker computes the assignment and moves only the partitions that must move)
or ``classic`` (the cooperative-sticky assignor: incremental too, driven by the members). Either
way a rebalance names only the partitions that move, so the engine keeps applying the others.

Threads. librdkafka's calls block, and confluent-kafka lets one call into a consumer at a time
(a second one waits at its gate until the first returns); the rebalance callbacks run inside
the ``consume`` call that serves them. So each client here has one thread of its own
(:class:`_ClientThread`) that runs its calls in order. While a rebalance callback waits for the
engine — which commits the offsets of its committed batches before it lets partitions go — that
thread runs the calls that arrive meanwhile from inside the callback, where the gate admits
them. A fetch waits for records in slices of :data:`FETCH_SLICE_SECONDS`, so an offset commit
waits at most one slice behind an idle fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import (
    OFFSET_INVALID,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as ConfluentPartition

from spectral.errors import PermanentError, TransientError
from spectral.faults import Refusal
from spectral.kafka.aiokafka_source import (
    FETCH_MAX_BYTES,
    MAX_POLL_INTERVAL_MS,
    PARTITION_FETCH_BYTES,
)
from spectral.kafka.clients import ClientSource, ClientTransport
from spectral.kafka.dlq import MAX_REQUEST_BYTES
from spectral.kafka.produce import Message as Outgoing
from spectral.kafka.produce import Outcome, Refused, Sent
from spectral.kafka.transport import (
    FetchOptions,
    FixedRange,
    Reading,
    Rebalance,
    Record,
    Subscription,
    TopicPartition,
    UnreadableRecordsError,
    offsets_after,
)
from spectral.observability.logging import get_logger
from spectral.settings import GroupProtocol, SecurityProtocol, Settings

__all__ = [
    "ConfluentRecord",
    "ConfluentSender",
    "ConfluentSource",
    "ConfluentTransport",
    "KafkaClientError",
    "confluent_config",
]

log = get_logger(__name__)

FETCH_SLICE_SECONDS: Final = 0.05
"""The longest one ``consume`` call waits for records; a fetch waits in slices of it."""
PUMP_SECONDS: Final = 0.1
"""A member whose engine has not fetched for this long (its pipeline is full, a batch is held)
still serves its rebalances: librdkafka delivers them only inside a consume call."""
CLASSIC_SESSION_TIMEOUT_MS: Final = 10_000
"""The classic protocol's session timeout (aiokafka's default, so both transports fail over
alike); the consumer protocol's is the broker's ``group.consumer.session.timeout.ms``."""

_UNREADABLE: Final = frozenset({KafkaError._BAD_MSG, KafkaError._BAD_COMPRESSION})  # noqa: SLF001 - librdkafka's own codes
_TRANSIENT: Final = frozenset(
    {
        KafkaError._MSG_TIMED_OUT,  # noqa: SLF001
        KafkaError._TIMED_OUT,  # noqa: SLF001
        KafkaError._TIMED_OUT_QUEUE,  # noqa: SLF001
        KafkaError._TRANSPORT,  # noqa: SLF001
        KafkaError._ALL_BROKERS_DOWN,  # noqa: SLF001
        KafkaError._QUEUE_FULL,  # noqa: SLF001
        KafkaError._WAIT_COORD,  # noqa: SLF001
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)
_MOVED: Final = frozenset(
    {
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError._ASSIGNMENT_LOST,  # noqa: SLF001
        KafkaError._STATE,  # noqa: SLF001 - not a member (any more)
    }
)
"""Commit refusals that mean the partitions moved on without this member."""
_REBALANCING: Final = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.STALE_MEMBER_EPOCH,
    }
)
"""Commit refusals while the group rebalances: the commit carried the generation (or member
epoch) the rebalance is replacing. An incremental rebalance moves only some partitions, so the
member may keep these: the commit is tried again once it has joined the new generation."""
REBALANCE_COMMIT_SECONDS: Final = CLASSIC_SESSION_TIMEOUT_MS / 1000
"""How long a commit refused by a rebalance is tried again, while this member still owns its
partitions (a rebalance ends within a session, or the member is out of the group)."""
REBALANCE_COMMIT_PAUSE: Final = 0.2
"""The pause between two tries of a commit a rebalance refused."""


class KafkaClientError(PermanentError):
    """librdkafka reports a fatal error: the client can never go on (a fenced static member, a
    broken configuration); the process stops and its partitions move."""


def _transient(error: KafkaError) -> bool:
    return bool(error.retriable()) or error.code() in _TRANSIENT


def _fault(error: KafkaError, what: str) -> Exception:
    """``error`` as the exception the engine's retrying understands."""
    if error.fatal():
        return KafkaClientError(f"{what}: {error.str()}")
    return TransientError(f"{what}: {error.name()}: {error.str()}")


def _refusal(error: KafkaError, faults: list[Exception]) -> Refused:
    """``error`` as the refusal of one record; a fault of the infrastructure is added to
    ``faults`` (raised once every delivery settled)."""
    if _transient(error) or error.fatal():
        faults.append(_fault(error, "dead letter not acknowledged"))
        return Refused("not acknowledged")
    return Refused(f"{error.name()}: {error.str()}"[:500])


def confluent_config(settings: Settings, bootstrap: str, client_id: str) -> dict[str, Any]:
    """librdkafka properties for ``bootstrap`` with the settings' security options and request
    timeout (``socket.timeout.ms``: as aiokafka's ``request_timeout_ms``, a frozen broker holds a
    request only this long)."""
    protocol = settings.kafka_security_protocol
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "security.protocol": protocol.value.lower(),
        "socket.timeout.ms": settings.kafka_request_timeout_ms,
        "topic.metadata.refresh.interval.ms": int(settings.kafka_metadata_refresh_seconds * 1000),
        "error_cb": _log_error,
        "logger": CLIENT_LOG,
    }
    if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        # The system's CAs, as aiokafka's default SSL context: the wheel's OpenSSL looks for them.
        config["ssl.ca.location"] = (
            str(settings.kafka_ca_file) if settings.kafka_ca_file else "probe"
        )
    if settings.kafka_sasl_mechanism is not None:
        config["sasl.mechanism"] = settings.kafka_sasl_mechanism.value
        config["sasl.username"] = settings.kafka_sasl_username or ""
        config["sasl.password"] = (
            settings.kafka_sasl_password.get_secret_value() if settings.kafka_sasl_password else ""
        )
    return config


CLIENT_LOG: Final = logging.getLogger("kafka.librdkafka")
"""Where librdkafka's own lines and its client-wide errors go: a logger of the Kafka client
family, so the client-line throttle (spectral.observability.outages) passes the first lines of
an outage and counts the rest. librdkafka reports a broker that is down dozens of times a
second per client (a consumer wrote 1,100 lines in a 30 s broker outage before)."""


def _log_error(error: KafkaError) -> None:
    """librdkafka's client-wide errors (brokers down, authentication): it retries on its own.
    A fatal one is not throttled: the client stops for good."""
    if error.fatal():
        log.error("kafka client error", error=f"{error.name()}: {error.str()}", fatal=True)
        return
    CLIENT_LOG.warning("kafka client error %s: %s", error.name(), error.str())


# -- the client's thread ----------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    function: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


_WAKE: Final = object()
_STOP: Final = object()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the caller was cancelled
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _ClientThread:
    """One thread that runs every call into one client, in order (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, function: Callable[[], Any]) -> Any:
        """``function()`` on the client's thread; its result or its exception."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._calls.put(_Call(function, loop, future))
        return await future

    def wait(self, loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, Any]) -> Any:
        """On the client's thread, inside a callback: run ``work`` on ``loop`` and serve the
        calls that arrive until it is done."""
        done = asyncio.run_coroutine_threadsafe(work, loop)
        done.add_done_callback(lambda _: self._calls.put(_WAKE))
        while not done.done():
            item = self._calls.get()
            if isinstance(item, _Call):
                self._execute(item)
            elif item is _STOP:
                self._calls.put(_STOP)  # for the serving loop, once the callback returned
                break
        return done.result()

    def _execute(self, call: _Call) -> None:
        try:
            result = call.function()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
            call.loop.call_soon_threadsafe(_settle, call.future, None, exc)
        else:
            call.loop.call_soon_threadsafe(_settle, call.future, result, None)

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is _STOP:
                return
            if isinstance(item, _Call):
                self._execute(item)

    async def stop(self) -> None:
        self._calls.put(_STOP)
        await asyncio.to_thread(self._thread.join)


# -- records ----------------------------------------------------------------------------------


class ConfluentRecord:
    """A fetched record (a :class:`~spectral.kafka.transport.Record`), copied out of librdkafka's
    message once."""

    __slots__ = ("headers", "key", "offset", "partition", "timestamp", "topic", "value")

    def __init__(self, message: Message) -> None:
        self.topic: str = message.topic() or ""
        self.partition: int = message.partition() or 0
        self.offset: int = message.offset() or 0
        self.key: bytes | None = message.key()
        self.value: bytes | None = message.value()
        kind, stamp = message.timestamp()
        self.timestamp: int | None = None if kind == TIMESTAMP_NOT_AVAILABLE else stamp
        self.headers: Sequence[tuple[str, bytes | None]] | None = message.headers()  # type: ignore[assignment]


def _ours(partitions: Sequence[ConfluentPartition]) -> list[TopicPartition]:
    return [TopicPartition(p.topic, p.partition) for p in partitions]


# -- the record source ------------------------------------------------------------------------


class ConfluentSource(ClientSource):
    """A :class:`~spectral.kafka.transport.RecordSource` on one librdkafka consumer."""

    def __init__(
        self,
        settings: Settings,
        bootstrap: str,
        reading: Reading,
        options: FetchOptions | None = None,
    ) -> None:
        super().__init__(settings, bootstrap, reading, options)
        self._thread: _ClientThread | None = None
        self._consumer: Consumer | None = None
        self._owned: frozenset[TopicPartition] = frozenset()
        self._rebalance: Rebalance | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._topics: list[str] = []
        self._timeout = settings.kafka_request_timeout_ms / 1000
        self._consuming = asyncio.Lock()
        """Held across each consume call and the buffer it fills: records leave in order."""
        self._buffer: list[Record] = []
        """Records a pump consumed while the engine was not fetching (live members only)."""
        self._revocations = 0
        self._losses = 0
        self._lost = False
        """The group moved on without this member (its partitions were lost, e.g. behind a
        broker outage longer than the session) and has not assigned it partitions since."""
        self._last_fetch = 0.0
        self._pump: asyncio.Task[None] | None = None
        self._pump_failure: Exception | None = None

    def _config(self) -> dict[str, Any]:
        reading = self.reading
        config = confluent_config(self._settings, self._bootstrap, self._options.client_id)
        config |= {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "fetch.max.bytes": FETCH_MAX_BYTES,
            "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
            "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
            "auto.offset.reset": (
                reading.auto_offset_reset if isinstance(reading, Subscription) else "earliest"
            ),
        }
        if isinstance(reading, Subscription):
            config["group.id"] = reading.group
            if self._settings.kafka_group_protocol is GroupProtocol.CONSUMER:
                config["group.protocol"] = "consumer"
            else:
                config |= {
                    "group.protocol": "classic",
                    "partition.assignment.strategy": "cooperative-sticky",
                    "session.timeout.ms": CLASSIC_SESSION_TIMEOUT_MS,
                    "heartbeat.interval.ms": CLASSIC_SESSION_TIMEOUT_MS // 3,
                }
        else:
            config["group.id"] = f"spectral-range-{id(self)}"  # required; never joined
        config |= {k: v for k, v in self._options.extra.items() if "." in k}
        return config

    async def start(self, topics: Sequence[str], rebalance: Rebalance) -> None:
        if self._attached:
            return
        if self._thread is None:
            self._thread = _ClientThread(f"kafka-{self._options.client_id}")
        self._loop = asyncio.get_running_loop()
        self._rebalance = rebalance
        self._topics = list(topics)
        if self._consumer is None:
            config = self._config()
            self._consumer = await self._thread.run(lambda: Consumer(config))
        consumer = self._consumer
        reading = self.reading
        if isinstance(reading, Subscription):
            await self._thread.run(
                lambda: consumer.subscribe(
                    self._topics,
                    on_assign=self._on_assign,
                    on_revoke=self._on_revoke,
                    on_lost=self._on_lost,
                )
            )
            self._last_fetch = time.monotonic()
            self._pump = asyncio.create_task(self._pumping(), name="kafka-rebalances")
        else:
            start = [
                ConfluentPartition(tp.topic, tp.partition, reading.start[tp])
                for tp in sorted(self._remaining)
            ]
            await self._thread.run(lambda: consumer.assign(start))
            self._owned = frozenset(self._remaining)
        self._attached = True

    # The rebalance callbacks run on the client's thread, inside a consume call.

    def _tell(self, work: Coroutine[Any, Any, None]) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:  # a callback outside start..stop: nothing to tell
            work.close()
            return
        thread.wait(loop, work)

    def _told(self) -> Rebalance:
        if self._rebalance is None:
            msg = "the source was not started"
            raise RuntimeError(msg)
        return self._rebalance

    def _on_assign(self, _consumer: Consumer, partitions: list[ConfluentPartition]) -> None:
        assigned = _ours(partitions)
        self._owned |= frozenset(assigned)
        self._lost = False
        rebalance = self._told()

        async def tell() -> None:
            rebalance.assigned(assigned)

        self._tell(tell())
        if assigned:
            log.info("partitions assigned", partitions=self.names(assigned))

    def _on_revoke(self, _consumer: Consumer, partitions: list[ConfluentPartition]) -> None:
        revoked = _ours(partitions)
        if not revoked:
            return
        self._revocations += 1
        self._tell(self._revoking(revoked))  # its commits go through meanwhile
        self._owned -= frozenset(revoked)
        log.info("partitions revoked", partitions=self.names(revoked))

    def _on_lost(self, _consumer: Consumer, partitions: list[ConfluentPartition]) -> None:
        lost = _ours(partitions)
        self._owned -= frozenset(lost)  # first: nothing of them may be committed any more
        if lost:
            self._losses += 1
            self._lost = True  # not caught up until the group assigns partitions again
            self._revocations += 1
            self._tell(self._revoking(lost))
            log.warning(
                "partitions lost: the group moved on without this member",
                partitions=self.names(lost),
            )

    async def _revoking(self, partitions: list[TopicPartition]) -> None:
        """On the loop: forget what the pump holds of ``partitions``, then tell the engine."""
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._buffer = [r for r in self._buffer if (r.topic, r.partition) not in gone]
        await self._told().revoking(partitions)

    async def _pumping(self) -> None:
        """Consume into the buffer whenever the engine has not fetched for a while, so the
        rebalances librdkafka delivers inside consume calls are served (see the module
        docstring); at most ``max_records`` more each time once the buffer holds two fetches."""
        limit = self._options.max_records
        while True:
            await asyncio.sleep(PUMP_SECONDS)
            if self._consuming.locked() or time.monotonic() - self._last_fetch < PUMP_SECONDS:
                continue
            async with self._consuming:
                thread, consumer = self._started()
                room = max(2 * limit - len(self._buffer), 1)
                try:
                    self._buffer.extend(await self._consume(thread, consumer, room, 0))
                except Exception as exc:  # noqa: BLE001 - the engine's next fetch raises it
                    self._pump_failure = exc
                    return

    async def _consume(
        self, thread: _ClientThread, consumer: Consumer, limit: int, wait: float
    ) -> list[Record]:
        """One consume call; its records, less those of partitions revoked meanwhile."""
        revocations = self._revocations
        messages: list[Message] = await thread.run(lambda: consumer.consume(limit, wait))
        records = self._records(messages)
        if self._revocations != revocations and self.live:
            owned = self._owned  # what was fetched before a revocation inside the call
            records = [r for r in records if TopicPartition(r.topic, r.partition) in owned]
        return records

    def _records(self, messages: list[Message]) -> list[Record]:
        records: list[Record] = []
        for message in messages:
            error = message.error()
            if error is None:
                records.append(ConfluentRecord(message))
            elif error.code() in _UNREADABLE:
                where = f"{message.topic()}:{message.partition()}@{message.offset()}"
                raise UnreadableRecordsError(
                    f"Kafka returned a record this client cannot read at {where} "
                    f"({error.name()}: {error.str()}). Nothing after it was committed; a corrupt "
                    "batch must be skipped by hand (spectral offsets reset --to-offset)"
                )
            elif error.fatal():
                raise _fault(error, "the consumer failed")
            else:
                log.warning("fetch failed; retrying", error=f"{error.name()}: {error.str()}")
        return records

    def _started(self) -> tuple[_ClientThread, Consumer]:
        if self._thread is None or self._consumer is None or not self._attached:
            msg = "the source was not started"
            raise RuntimeError(msg)
        return self._thread, self._consumer

    async def fetch(self, timeout_ms: int) -> Sequence[Record]:
        thread, consumer = self._started()
        if self._pump_failure is not None:
            failure, self._pump_failure = self._pump_failure, None
            self._pump = asyncio.create_task(self._pumping(), name="kafka-rebalances")
            raise failure
        limit = self._options.max_records
        async with self._consuming:
            try:
                if self._buffer:
                    records = self._buffer[:limit]
                    del self._buffer[:limit]
                    return records
                records = await self._consume(thread, consumer, limit, 0)
                deadline = time.monotonic() + timeout_ms / 1000
                while not records:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return []
                    wait = min(left, FETCH_SLICE_SECONDS)
                    records = await self._consume(thread, consumer, limit, wait)
            finally:
                self._last_fetch = time.monotonic()
        reading = self.reading
        if isinstance(reading, FixedRange):
            end = reading.end
            return [r for r in records if r.offset < end[TopicPartition(r.topic, r.partition)]]
        return records

    async def finished(self) -> bool:
        """A range pauses the partitions that reached their end; True once none is left."""
        reading = self.reading
        if not isinstance(reading, FixedRange):
            return False
        thread, consumer = self._started()
        if not self._remaining:
            return True
        asked = [ConfluentPartition(tp.topic, tp.partition) for tp in self._remaining]
        positions = await thread.run(lambda: consumer.position(asked))
        done = [
            p for p in positions if p.offset >= reading.end[TopicPartition(p.topic, p.partition)]
        ]
        if done:
            self._remaining -= set(_ours(done))
            await thread.run(lambda: consumer.pause(done))
        return not self._remaining

    async def commit(self, records: Sequence[Record]) -> Mapping[TopicPartition, int]:
        """Commit past ``records`` on the partitions this member owns. A commit a rebalance
        refuses (it carried the generation being replaced) is tried again, for the partitions
        the member still owns, until the rebalance is over (at most REBALANCE_COMMIT_SECONDS):
        an incremental rebalance leaves it most of them, and their records may be the last
        ones, whose offsets no later commit would carry (the group's offsets would stay
        behind what the database committed until the next record arrives). A partition
        revoked meanwhile is committed from inside its revocation (the engine waits for it
        there); once the member's partitions were lost, nothing is tried again."""
        if not self.live:
            return {}
        thread, consumer = self._started()
        pending = offsets_after(records)
        committed: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + REBALANCE_COMMIT_SECONDS
        losses = self._losses
        while True:
            owned = {tp: offset for tp, offset in pending.items() if tp in self._owned}
            if not owned or self._losses != losses:
                # Lost meanwhile: partitions given back since may have been read and committed
                # further by another member, and an offset must never go back.
                return committed
            done, pending, refused = await self._commit(thread, consumer, owned)
            committed |= done
            if refused is None:
                return committed
            if time.monotonic() >= deadline:
                log.warning("offset commit refused after a rebalance", error=refused.str())
                return committed
            log.info(
                "offset commit refused while the group rebalances; trying again",
                partitions=self.names(pending),
                error=refused.str(),
            )
            await asyncio.sleep(REBALANCE_COMMIT_PAUSE)

    async def _commit(
        self, thread: _ClientThread, consumer: Consumer, owned: Mapping[TopicPartition, int]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int], KafkaError | None]:
        """One commit of ``owned``: the offsets committed, those a rebalance refused (to be
        tried again) and its refusal (None: none). Partitions that moved on without this
        member are not committed (logged); a fault raises, for the engine to retry."""
        offsets = [ConfluentPartition(tp.topic, tp.partition, o) for tp, o in owned.items()]
        try:
            done = await thread.run(lambda: consumer.commit(offsets=offsets, asynchronous=False))
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() in _REBALANCING:
                return {}, dict(owned), error
            if error.code() in _MOVED:
                log.warning("offset commit refused after a rebalance", error=error.str())
                return {}, {}, None
            raise _fault(error, "offset commit failed") from exc
        failed = {TopicPartition(p.topic, p.partition): p.error for p in done or () if p.error}
        again: dict[TopicPartition, int] = {}
        refused: KafkaError | None = None
        for tp, error in failed.items():
            if error.code() in _REBALANCING:
                again[tp], refused = owned[tp], error
            elif error.code() in _MOVED:
                log.warning("offset commit refused after a rebalance", error=error.str())
            else:
                raise _fault(error, "offset commit failed")
        return {tp: o for tp, o in owned.items() if tp not in failed}, again, refused

    def assignment(self) -> frozenset[TopicPartition]:
        return self._owned

    async def _watermarks(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        thread, consumer = self._started()
        timeout = self._timeout

        def ask() -> dict[TopicPartition, tuple[int, int]]:
            return {
                tp: consumer.get_watermark_offsets(
                    ConfluentPartition(tp.topic, tp.partition), timeout=timeout, cached=False
                )
                for tp in partitions
            }

        try:
            found: dict[TopicPartition, tuple[int, int] | None] = await thread.run(ask)
        except KafkaException as exc:
            raise _fault(exc.args[0], "offsets unavailable") from exc
        missing = [tp for tp, marks in found.items() if marks is None]
        if missing:
            raise TransientError(f"no offsets for {', '.join(self.names(missing))}")
        return {tp: marks for tp, marks in found.items() if marks is not None}

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return {tp: high for tp, (_, high) in (await self._watermarks(partitions)).items()}

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return {tp: low for tp, (low, _) in (await self._watermarks(partitions)).items()}

    async def committed(self, partition: TopicPartition) -> int | None:
        if not self.live:
            return None
        thread, consumer = self._started()
        asked = [ConfluentPartition(partition.topic, partition.partition)]
        timeout = self._timeout
        try:
            found = await thread.run(lambda: consumer.committed(asked, timeout=timeout))
        except KafkaException as exc:
            raise _fault(exc.args[0], "committed offsets unavailable") from exc
        offset = found[0].offset
        return None if offset in (OFFSET_INVALID, -1) or offset < 0 else int(offset)

    async def caught_up(self) -> bool:
        """Every partition this member owns read to its end: its position at the high
        watermark (past any transaction markers) or, where it has consumed nothing yet, the
        group's committed offset there (an empty partition needs neither). After an assignment
        librdkafka looks the offsets up before its first fetch — seconds on a busy machine,
        while fetches return nothing —, so a member is not idle before. A member whose
        partitions were lost (the classic protocol loses them when the coordinator does not
        answer for a session) owns nothing until it joined again and the group assigned it
        partitions, most likely the same: it is not caught up meanwhile."""
        if self._lost:
            return False
        owned = sorted(self._owned)
        if not owned:
            return True
        thread, consumer = self._started()
        marks = await self._watermarks(owned)
        asked = [ConfluentPartition(tp.topic, tp.partition) for tp in owned]
        positions = await thread.run(lambda: consumer.position(asked))
        for found in positions:
            tp = TopicPartition(found.topic, found.partition)
            low, high = marks[tp]
            position = found.offset if found.offset >= 0 else await self.committed(tp)
            if high > low and (position is None or position < high):
                return False
        return True

    async def probe(self) -> None:
        thread, consumer = self._started()
        assigned = self._owned
        if assigned:
            await self.end_offsets(assigned)
            return
        timeout = self._timeout
        topic = self._topics[0] if self._topics else None
        try:
            await thread.run(lambda: consumer.list_topics(topic, timeout=timeout))
        except KafkaException as exc:
            raise _fault(exc.args[0], "the cluster does not answer") from exc

    async def stop(self) -> None:
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        thread, consumer = self._thread, self._consumer
        try:
            if thread is not None and consumer is not None:
                # Leaves the group: the revocation runs through the rebalance callbacks first,
                # and the engine commits through this source while it does.
                with contextlib.suppress(KafkaException, RuntimeError):
                    await asyncio.shield(thread.run(consumer.close))
        finally:
            self._thread = self._consumer = None
            self._attached = False
            self._owned = frozenset()
            self._lost = False
            self._buffer = []
            if thread is not None:
                await thread.stop()


PARTITIONER: Final = "murmur2_random"
"""A keyed record goes to the partition aiokafka and the Java client choose (murmur2 of the key;
librdkafka's default, CRC32, would not): switching transports, or redriving a dead letter,
keeps a key on its partition, so its records stay in order."""


# -- the sender -------------------------------------------------------------------------------


class ConfluentSender:
    """A :class:`~spectral.kafka.produce.Sender` on a librdkafka producer of its own: ``acks=all``,
    no idempotence (spectral.kafka.config.refusable_producer_kwargs says why)."""

    def __init__(
        self,
        settings: Settings,
        bootstrap: str,
        *,
        topics: Sequence[str] = (),
        delivery_timeout_ms: int | None = None,
    ) -> None:
        """``delivery_timeout_ms``: a delivery window longer than twice the request timeout."""
        self._settings = settings
        self._bootstrap = bootstrap
        self._topics = sorted(topics)
        self._thread: _ClientThread | None = None
        self._producer: Producer | None = None
        self._timeout = settings.kafka_request_timeout_ms / 1000
        self._delivery_ms = max(2 * settings.kafka_request_timeout_ms, delivery_timeout_ms or 0)

    async def start(self) -> None:
        if self._producer is not None:
            return
        if self._thread is None:
            self._thread = _ClientThread("kafka-dead-letters")
        config = confluent_config(self._settings, self._bootstrap, "spectral-dead-letters")
        config |= {
            "acks": "all",
            "enable.idempotence": False,
            "partitioner": PARTITIONER,
            "linger.ms": 5,
            "message.max.bytes": MAX_REQUEST_BYTES,  # dead letters carry the original bytes
            "request.timeout.ms": self._settings.kafka_request_timeout_ms,
            "message.timeout.ms": self._delivery_ms,
        }
        producer: Producer = await self._thread.run(lambda: Producer(config))
        timeout = self._timeout
        topic = self._topics[0] if self._topics else None
        try:
            await self._thread.run(lambda: producer.list_topics(topic, timeout=timeout))
        except KafkaException as exc:
            raise _fault(exc.args[0], "the cluster does not answer") from exc
        self._producer = producer

    def _client(self) -> tuple[_ClientThread, Producer]:
        if self._thread is None or self._producer is None:
            msg = "the sender was not started"
            raise RuntimeError(msg)
        return self._thread, self._producer

    async def send_each(self, messages: Sequence[Outgoing]) -> list[Outcome]:
        thread, producer = self._client()
        return await thread.run(lambda: self._send(producer, messages))  # type: ignore[no-any-return]

    async def send_alone(self, message: Outgoing) -> Outcome:
        return (await self.send_each([message]))[0]

    def _send(self, producer: Producer, messages: Sequence[Outgoing]) -> list[Outcome]:
        """On the client's thread: produce every message, serve the delivery reports until all
        settled, one outcome each; a fault raises once all settled."""
        outcomes: list[Outcome | None] = [None] * len(messages)
        faults: list[Exception] = []

        def delivered(index: int) -> Callable[[KafkaError | None, Message], None]:
            def report(error: KafkaError | None, message: Message) -> None:
                if error is None:
                    outcomes[index] = Sent(message.partition() or 0, message.offset() or 0)
                else:
                    outcomes[index] = _refusal(error, faults)

            return report

        for index, message in enumerate(messages):
            try:
                producer.produce(
                    message.topic,
                    value=message.value,
                    key=message.key,
                    headers=list(message.headers),
                    on_delivery=delivered(index),
                )
            except BufferError:
                faults.append(TransientError("the producer's queue is full"))
                outcomes[index] = Refused("not acknowledged")
            except KafkaException as exc:
                outcomes[index] = _refusal(exc.args[0], faults)
            except (TypeError, ValueError) as exc:
                outcomes[index] = Refused(f"{type(exc).__name__}: {exc}"[:500])
        # message.timeout.ms settles every one before
        left = producer.flush(self._delivery_ms / 1000 + self._timeout)
        if left:
            faults.append(TransientError(f"{left} dead letters not acknowledged in time"))
        if faults:
            raise faults[0]
        return [o if o is not None else Refused("not acknowledged") for o in outcomes]

    async def stop(self) -> None:
        thread, self._thread = self._thread, None
        producer, self._producer = self._producer, None
        if thread is None:
            return
        try:
            if producer is not None:
                timeout = self._timeout
                with contextlib.suppress(KafkaException):
                    await asyncio.shield(thread.run(lambda: producer.flush(timeout)))
        finally:
            await thread.stop()


# -- the outbox relay's producer ------------------------------------------------------------------

_REFUSALS: Final[Mapping[int, Refusal]] = {
    KafkaError.MSG_SIZE_TOO_LARGE: Refusal.TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE: Refusal.TOO_LARGE,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: Refusal.NOT_AUTHORIZED,
    KafkaError.TOPIC_EXCEPTION: Refusal.INVALID,
    KafkaError.INVALID_MSG: Refusal.INVALID,
    KafkaError.INVALID_TIMESTAMP: Refusal.INVALID,
    KafkaError.POLICY_VIOLATION: Refusal.INVALID,
    KafkaError.INVALID_RECORD: Refusal.INVALID,
}
"""librdkafka's codes for a record the broker (or the client, before sending) refuses for good:
the refusals spectral.faults.refusal_of names for aiokafka's exceptions."""


class RecordRefusedError(PermanentError):
    """The broker or the client refuses this record for good (``refusal`` says why)."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal


def _send_error(error: KafkaError) -> Exception:
    """A failed send as the exception the relay classifies: a refusal of the record, a fault of
    the cluster (transient) or of the client (fatal)."""
    refusal = _REFUSALS.get(error.code())
    if refusal is not None and not error.retriable():
        return RecordRefusedError(refusal, f"{error.name()}: {error.str()}"[:500])
    return _fault(error, "record not acknowledged")


class ConfluentPublisher:
    """The outbox relay's producer on librdkafka: ``acks=all`` and idempotence (as
    spectral.kafka.config.producer_kwargs: a retry never writes a record twice nor out of order
    within its partition). :meth:`send` has aiokafka's shape — it queues the record and returns
    a future of its acknowledgement (:class:`~spectral.kafka.produce.Sent`) or of its failure —
    so the relay publishes through either client alike. ``produce`` never blocks (it queues);
    a thread of the publisher's own serves the delivery reports (``poll``)."""

    def __init__(
        self,
        settings: Settings,
        bootstrap: str,
        *,
        client_id: str,
        linger_ms: int,
        max_batch_bytes: int,
        max_request_bytes: int,
    ) -> None:
        self._config = confluent_config(settings, bootstrap, client_id) | {
            "acks": "all",
            "enable.idempotence": True,
            "partitioner": PARTITIONER,
            "linger.ms": linger_ms,
            "batch.size": max_batch_bytes,
            "message.max.bytes": max_request_bytes,
            "request.timeout.ms": settings.kafka_request_timeout_ms,
            # as aiokafka's: a record waits for its acknowledgement at most the request timeout
            # (then the batch fails and the relay's session backs off and sends it again)
            "message.timeout.ms": settings.kafka_request_timeout_ms,
        }
        self._timeout = settings.kafka_request_timeout_ms / 1000
        self._producer: Producer | None = None
        self._polling: threading.Thread | None = None
        self._stopping = threading.Event()

    async def start(self) -> None:
        """Connect; a cluster that does not answer raises a transient fault."""
        if self._producer is not None:
            return
        producer = Producer(self._config)
        timeout = self._timeout
        try:
            await asyncio.to_thread(lambda: producer.list_topics(timeout=timeout))
        except KafkaException as exc:
            await asyncio.to_thread(producer.flush, 0)
            raise _fault(exc.args[0], "the cluster does not answer") from exc
        self._producer = producer
        self._stopping.clear()
        self._polling = threading.Thread(
            target=self._poll, args=(producer,), name="kafka-relay-deliveries", daemon=True
        )
        self._polling.start()

    def _poll(self, producer: Producer) -> None:
        while not self._stopping.is_set():
            producer.poll(FETCH_SLICE_SECONDS)

    async def send(
        self,
        topic: str,
        *,
        value: bytes,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes]],
    ) -> asyncio.Future[Sent]:
        """Queue one record; the future of its acknowledgement. A record the client refuses
        before sending it raises :class:`RecordRefusedError`; a full queue, a transient fault."""
        producer = self._producer
        if producer is None:
            msg = "the publisher was not started"
            raise RuntimeError(msg)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Sent] = loop.create_future()

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                sent = Sent(message.partition() or 0, message.offset() or 0)
                loop.call_soon_threadsafe(_settle, future, sent, None)
            else:
                loop.call_soon_threadsafe(_settle, future, None, _send_error(error))

        try:
            producer.produce(
                topic, value=value, key=key, headers=list(headers), on_delivery=delivered
            )
        except BufferError as exc:
            msg = "the producer's queue is full"
            raise TransientError(msg) from exc
        except KafkaException as exc:
            raise _send_error(exc.args[0]) from exc
        return future

    async def stop(self) -> None:
        """Wait for the records queued (at most the request timeout), then close."""
        producer, self._producer = self._producer, None
        polling, self._polling = self._polling, None
        self._stopping.set()
        if polling is not None:
            await asyncio.to_thread(polling.join)
        if producer is not None:
            timeout = self._timeout
            await asyncio.shield(asyncio.to_thread(producer.flush, timeout))


class ConfluentTransport(ClientTransport):
    """The confluent :class:`~spectral.kafka.transport.Transport` of one cluster."""

    name = "confluent"
    source_type = ConfluentSource
    sender_type = ConfluentSender
