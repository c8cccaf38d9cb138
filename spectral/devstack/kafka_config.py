"""Pure parts of the local Kafka broker: its configuration, JVM arguments and state file.

Nothing here touches the file system or starts a process, so all of it is unit-tested directly.
The manager that does the I/O is ``spectral.devstack.kafka``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
NODE_ID = 1
BROKER_LISTENER = "PLAINTEXT"
CONTROLLER_LISTENER = "CONTROLLER"
KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"

# Small and fast for one developer or one CI run, not for production. Every key is a broker
# configuration of Kafka 3.9 and 4.x; a key an older broker does not know is only logged by it.
# Replication settings are added per cluster size (see :func:`replication_settings`).
_TUNING: tuple[tuple[str, str], ...] = (
    ("num.partitions", "3"),
    ("auto.create.topics.enable", "true"),
    ("delete.topic.enable", "true"),
    ("offsets.topic.num.partitions", "10"),
    ("transaction.state.log.num.partitions", "10"),
    ("group.initial.rebalance.delay.ms", "0"),
    # Lets fault tests use short consumer session timeouts (the broker default floor is 6 s).
    ("group.min.session.timeout.ms", "1000"),
    # Both consumer group protocols: classic, and KIP-848's (the confluent transport's
    # SPECTRAL_KAFKA_GROUP_PROTOCOL=consumer), whose session the broker holds: 10 s as the
    # classic one's (its default is 45 s), heartbeats each second (how soon a member learns
    # of a new assignment).
    ("group.coordinator.rebalance.protocols", "classic,consumer"),
    ("group.consumer.min.session.timeout.ms", "1000"),
    ("group.consumer.session.timeout.ms", "10000"),
    ("group.consumer.min.heartbeat.interval.ms", "500"),
    ("group.consumer.heartbeat.interval.ms", "1000"),
    # After a SIGKILL the restarted broker may register only once the old incarnation's session
    # has expired; 4 s instead of 9 s makes a crash-restart in fault tests take ~5 s, not ~13 s.
    # In a cluster it is also how long a frozen or killed broker keeps its partitions before
    # the controller fences it and moves their leadership.
    ("broker.session.timeout.ms", "4000"),
    ("broker.heartbeat.interval.ms", "500"),
    ("num.network.threads", "2"),
    ("num.io.threads", "4"),
    ("background.threads", "4"),
    ("num.replica.fetchers", "1"),
    ("num.recovery.threads.per.data.dir", "1"),
    ("log.cleaner.threads", "1"),
    ("log.cleaner.dedupe.buffer.size", str(16 * 1024 * 1024)),
    ("log.retention.hours", "168"),
)

_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:MaxDirectMemorySize=256m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    # Marks the process as ours, so a recycled pid is never mistaken for the broker.
    "-Dspectral.devstack=kafka",
)

# A broker that lives for a test or a few (the tests' private brokers and clusters, started and
# stopped dozens of times in a run) spends most of its CPU starting: the C2 compiler's work on
# code that runs for seconds, and a parallel collector's threads. C1 alone compiles a small
# fraction of that, its code runs slower (which the few thousand records of a test never
# notice), and the serial collector needs no threads of its own. Never for a broker whose
# steady-state speed matters: the checkout's stack (`spectral dev up`) and the benchmark's.
_SHORT_LIVED_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms64m",
    "-Xmx512m",
    "-XX:MaxDirectMemorySize=256m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dspectral.devstack=kafka",
)

# The classes a short-lived JVM loads (thousands of Kafka's, Scala's and their libraries'), parsed
# and verified once and then mapped from a file by every later start: the JDK's dynamic class
# data sharing (JDK 13+). The JVM refuses an archive of other jars or another JDK build, so its
# name carries a digest of both (:func:`class_archive_name`); one short-lived broker records it
# as it exits (``-XX:ArchiveClassesAtExit``), and the file is used only once a JVM has mapped it
# (``-Xshare:on``): a torn archive crashes the JVM that maps it.
_RECORD_CLASSES = "-XX:ArchiveClassesAtExit="
_SHARE_CLASSES = "-XX:SharedArchiveFile="


@dataclass(frozen=True)
class ClassArchive:
    """A class archive a short-lived JVM maps (``record`` False) or records as it exits."""

    path: Path
    record: bool = False

    @property
    def options(self) -> tuple[str, ...]:
        return (f"{_RECORD_CLASSES if self.record else _SHARE_CLASSES}{self.path}",)


def class_archive_name(version: str, stamps: Sequence[str]) -> str:
    """The archive's file name for Kafka ``version``, from ``stamps`` that change with the JDK
    build and with any jar (their paths, sizes and modification times)."""
    digest = hashlib.sha256("\n".join(stamps).encode()).hexdigest()[:16]
    return f"kafka-{version}-{digest}.jsa"


def class_archive_check(java: str, classpath: str, archive: Path) -> list[str]:
    """A java command that fails unless it can map ``archive`` with ``classpath``."""
    return [
        java,
        *_SHORT_LIVED_JVM_OPTIONS,
        "-Xshare:on",
        f"{_SHARE_CLASSES}{archive}",
        "-cp",
        classpath,
        "-version",
    ]


_KAFKA_JAR = re.compile(r"^kafka_2\.1[23]-(?P<version>\d+\.\d+\.\d+)\.jar$")
_JAVA_VERSION = re.compile(r'version "(?P<major>\d+)(?:\.(?P<minor>\d+))?')


@dataclass(frozen=True)
class KafkaPorts:
    broker: int
    controller: int


@dataclass(frozen=True)
class QuorumNode:
    """One node of a local cluster: every node is a broker and a controller (combined mode), so
    each is also a voter of the KRaft quorum."""

    node_id: int
    ports: KafkaPorts

    @property
    def voter(self) -> str:
        return f"{self.node_id}@{HOST}:{self.ports.controller}"

    @property
    def address(self) -> str:
        return f"{HOST}:{self.ports.broker}"


@dataclass(frozen=True)
class ClusterMember:
    """What one node of a local cluster knows of the cluster: its own place in the quorum,
    every voter, and the id all their log directories are formatted with."""

    node: QuorumNode
    quorum: tuple[QuorumNode, ...]
    cluster_id: str


def replication_settings(brokers: int) -> tuple[tuple[str, str], ...]:
    """Replication of a cluster of ``brokers`` nodes: every topic, the internal ones included,
    gets min(3, brokers) replicas, and ``min.insync.replicas`` 2 from 3 replicas on (else 1) —
    the rule ``spectral topics apply`` declares, so auto-created topics get it too."""
    replicas = max(1, min(3, brokers))
    min_isr = "2" if replicas >= 3 else "1"  # noqa: PLR2004 - the rule in the docstring
    factor = str(replicas)
    return (
        ("default.replication.factor", factor),
        ("min.insync.replicas", min_isr),
        ("offsets.topic.replication.factor", factor),
        ("transaction.state.log.replication.factor", factor),
        ("transaction.state.log.min.isr", min_isr),
        ("share.coordinator.state.topic.replication.factor", factor),
        ("share.coordinator.state.topic.min.isr", min_isr),
    )


@dataclass(frozen=True)
class KafkaLayout:
    """Where one broker keeps its files, all under ``<state_dir>/kafka``."""

    root: Path

    @property
    def properties(self) -> Path:
        return self.root / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def meta_properties(self) -> Path:
        return self.data_dir / "meta.properties"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def log_file(self) -> Path:
        """The broker's own log (log4j), rotated by size."""
        return self.logs_dir / "server.log"

    @property
    def console_file(self) -> Path:
        """The JVM's stdout and stderr: crashes and anything said before logging is set up."""
        return self.root / "kafka.out"

    @property
    def log4j2_config(self) -> Path:
        return self.root / "log4j2.xml"

    @property
    def log4j1_config(self) -> Path:
        return self.root / "log4j.properties"

    @property
    def pid_file(self) -> Path:
        return self.root / "kafka.pid"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def lock_file(self) -> Path:
        return self.root / ".lock"

    @property
    def class_archive_note(self) -> Path:
        """While this broker records the class archive of short-lived JVMs: where to, and the
        java and class path that must map it before it is used."""
        return self.root / "class-archive.recording"


@dataclass(frozen=True)
class KafkaState:
    """What ``state.json`` remembers between runs: the ports (reused so clients keep their
    bootstrap address across a stop and start), the cluster id the storage was formatted with,
    and the pid while a broker runs."""

    version: str
    port: int
    controller_port: int
    cluster_id: str
    pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def ports(self) -> KafkaPorts:
        return KafkaPorts(broker=self.port, controller=self.controller_port)

    def with_pid(self, pid: int | None) -> KafkaState:
        return KafkaState(
            version=self.version,
            port=self.port,
            controller_port=self.controller_port,
            cluster_id=self.cluster_id,
            pid=pid,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def parse_state(text: str) -> KafkaState | None:
    """The state in ``text``, or None when it is not a state file this code wrote."""
    try:
        raw: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    try:
        pid = raw.get("pid")
        state = KafkaState(
            version=_str(raw["version"]),
            port=_port(raw["port"]),
            controller_port=_port(raw["controller_port"]),
            cluster_id=_str(raw["cluster_id"]),
            pid=None if pid is None else _positive(pid),
        )
    except (KeyError, TypeError, ValueError):
        return None
    return state


@dataclass(frozen=True)
class ClusterFile:
    """``cluster.json``: what a cluster's nodes share, fixed when it is first started."""

    version: str
    cluster_id: str
    nodes: tuple[QuorumNode, ...]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes)

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "version": self.version,
                    "cluster_id": self.cluster_id,
                    "brokers": len(self.nodes),
                    "nodes": [{"node_id": n.node_id, **asdict(n.ports)} for n in self.nodes],
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )


def parse_cluster_file(text: str) -> ClusterFile | None:
    """The cluster in ``text``, or None when it is not a file this code wrote."""
    try:
        raw: Any = json.loads(text)
        nodes = tuple(
            QuorumNode(
                _positive(entry["node_id"]),
                KafkaPorts(broker=_port(entry["broker"]), controller=_port(entry["controller"])),
            )
            for entry in raw["nodes"]
        )
        cluster = ClusterFile(_str(raw["version"]), _str(raw["cluster_id"]), nodes)
    except (KeyError, TypeError, ValueError):
        return None
    ids = [n.node_id for n in nodes]
    ports = [p for n in nodes for p in (n.ports.broker, n.ports.controller)]
    if not nodes or len(set(ids)) != len(ids) or len(set(ports)) != len(ports):
        return None
    return cluster


def _str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError("expected a non-empty string")
    return value


def _positive(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TypeError("expected a positive integer")
    return value


def _port(value: Any) -> int:
    port = _positive(value)
    if port > 65535:  # noqa: PLR2004 - the largest TCP port
        raise ValueError("not a TCP port")
    return port


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64 without padding (22 characters),
    the form ``kafka-storage.sh random-uuid`` prints. Like Kafka's own ``Uuid.randomUuid`` it
    never starts with ``-``, which the storage tool's argument parser would take for an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not cluster_id.startswith("-"):
            return cluster_id


def _escape(value: str) -> str:
    """Escape a value for a Java properties file."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\:").replace("=", "\\=")


def render_server_properties(
    ports: KafkaPorts,
    data_dir: Path,
    *,
    node_id: int = NODE_ID,
    quorum: Sequence[QuorumNode] = (),
) -> str:
    """server.properties of one KRaft node listening on loopback only: broker and controller in
    one process, with a static quorum of the ``quorum``'s nodes (empty: a single node, the only
    voter)."""
    voters = ",".join(n.voter for n in quorum) or f"{node_id}@{HOST}:{ports.controller}"
    lines = [
        "# Written by spectral.devstack.kafka on every start; edits are overwritten.",
        "process.roles=broker,controller",
        f"node.id={node_id}",
        f"controller.quorum.voters={voters}",
        (
            f"listeners={BROKER_LISTENER}://{HOST}:{ports.broker},"
            f"{CONTROLLER_LISTENER}://{HOST}:{ports.controller}"
        ),
        f"advertised.listeners={BROKER_LISTENER}://{HOST}:{ports.broker}",
        (
            f"listener.security.protocol.map={BROKER_LISTENER}:PLAINTEXT,"
            f"{CONTROLLER_LISTENER}:PLAINTEXT"
        ),
        f"inter.broker.listener.name={BROKER_LISTENER}",
        f"controller.listener.names={CONTROLLER_LISTENER}",
        f"log.dirs={_escape(str(data_dir))}",
    ]
    lines.extend(f"{key}={value}" for key, value in _TUNING)
    lines.extend(f"{key}={value}" for key, value in replication_settings(len(quorum) or 1))
    return "\n".join(lines) + "\n"


def render_log4j1_properties() -> str:
    """Logging for a Kafka 3.x distribution (reload4j) given by KAFKA_HOME; Kafka 4.x uses the
    log4j2.xml shipped beside the manager. ``kafka.logs.dir`` is a JVM system property."""
    return _LOG4J1_PROPERTIES


_LOG4J1_PROPERTIES = """\
log4j.rootLogger=INFO, server
log4j.appender.server=org.apache.log4j.RollingFileAppender
log4j.appender.server.File=${kafka.logs.dir}/server.log
log4j.appender.server.MaxFileSize=20MB
log4j.appender.server.MaxBackupIndex=3
log4j.appender.server.layout=org.apache.log4j.PatternLayout
log4j.appender.server.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.authorizer.logger=WARN
"""


def jvm_command(
    java: str,
    libs_dir: Path,
    main_class: str,
    args: list[str],
    *,
    logs_dir: Path,
    log_config: Path,
    short_lived: bool = False,
    class_archive: ClassArchive | None = None,
) -> list[str]:
    """The java command line that runs ``main_class`` on the jars of ``libs_dir``;
    ``short_lived`` for a process that lives seconds or minutes (a tool, a test's broker): it
    starts on far less CPU and runs slower. A short-lived JVM may also map the classes of a
    ``class_archive`` (or record them into it when it exits)."""
    if log_config.suffix == ".xml":
        logging = f"-Dlog4j2.configurationFile={log_config}"
    else:
        logging = f"-Dlog4j.configuration={log_config.as_uri()}"
    if class_archive is not None and not short_lived:
        raise ValueError("only a short-lived JVM shares classes through an archive")
    return [
        java,
        *(_SHORT_LIVED_JVM_OPTIONS if short_lived else _JVM_OPTIONS),
        *(class_archive.options if class_archive is not None else ()),
        f"-Dkafka.logs.dir={logs_dir}",
        logging,
        "-cp",
        f"{libs_dir}/*",
        main_class,
        *args,
    ]


def storage_format_args(properties: Path, cluster_id: str) -> list[str]:
    """Arguments of ``kafka.tools.StorageTool`` that format the log directories once.

    With a static quorum (``controller.quorum.voters``) no ``--standalone`` is needed; the voter's
    address lives in server.properties, so a restart may move the controller to another port."""
    return ["format", "--cluster-id", cluster_id, "--config", str(properties), "--ignore-formatted"]


def kafka_version_of(jar_names: list[str]) -> str | None:
    """The Kafka version of a libs directory, read from its ``kafka_2.13-X.Y.Z.jar``."""
    for name in sorted(jar_names):
        match = _KAFKA_JAR.match(name)
        if match:
            return match["version"]
    return None


def java_major_version(version_output: str) -> int | None:
    """The major version in ``java -version`` output: 17 for "17.0.15", 8 for "1.8.0_402"."""
    match = _JAVA_VERSION.search(version_output)
    if not match:
        return None
    major = int(match["major"])
    if major == 1 and match["minor"]:
        return int(match["minor"])
    return major


def required_java(kafka_version: str) -> int:
    """Kafka 4.x brokers need Java 17; 3.x brokers run on Java 11."""
    return 17 if int(kafka_version.split(".", 1)[0]) >= 4 else 11  # noqa: PLR2004


def uses_log4j2(jar_names: list[str]) -> bool:
    """True when the libs carry log4j2 (Kafka 4.x, and our Maven set); False for reload4j."""
    return any(name.startswith("log4j-core-") for name in jar_names)
