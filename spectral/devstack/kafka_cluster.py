"""A real local Kafka cluster: several KRaft nodes from the same jars, no Docker.

``LocalKafkaCluster(state_dir, cache_dir, brokers=3).ensure_running()`` returns the bootstrap
``"127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"`` of a cluster whose every broker answers, starting
what is not running:

* every node is a broker and a controller (combined mode) and a voter of a static quorum, so
  the cluster keeps its metadata quorum and serves with any one node down (3 nodes: a majority
  of 2 voters remains); a separate controller quorum would cost three more JVMs on a
  developer's machine for no gain in what the cluster proves;
* replication follows ``spectral topics apply``: min(3, brokers) replicas for every topic, the
  internal ones included, and ``min.insync.replicas`` 2 from 3 replicas on
  (:func:`spectral.devstack.kafka_config.replication_settings`);
* ``<state_dir>/kafka/cluster.json`` remembers the broker count, the cluster id and every node's
  two ports, which never change (the voters know each other by them); node N keeps its files in
  ``<state_dir>/kafka/broker-N/`` exactly as a single broker keeps them in ``<state_dir>/kafka/``
  (``server.properties``, ``data/``, ``logs/server.log``, ``kafka.out``, ``kafka.pid``);
* a start launches every node that is not running first and then waits for each (a node of a
  quorum serves only once a majority of controllers runs); ``stop()`` sends SIGTERM to all at
  once (stopped one by one, the last ones would wait for a quorum that is gone).

``broker(n)`` is node n's own ``LocalKafka``: ``kill()``, ``pause()``, ``resume()``, ``stop()``
and ``start()`` act on that broker alone (fault tests). :func:`local_kafka` picks the single
broker or the cluster a state directory holds; one state directory holds one or the other.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from spectral.devstack.kafka import KAFKA_VERSION, KafkaStatus, LocalKafka
from spectral.devstack.kafka_config import (
    HOST,
    ClusterFile,
    ClusterMember,
    KafkaLayout,
    KafkaPorts,
    QuorumNode,
    new_cluster_id,
    parse_cluster_file,
)
from spectral.devstack.ports import free_port
from spectral.devstack.process import locked
from spectral.errors import ConfigurationError

__all__ = ["ClusterFile", "LocalKafkaCluster", "NodeStatus", "local_kafka", "parse_cluster_file"]

MAX_BROKERS = 9
_STOP_TIMEOUT = 30.0


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    running: bool
    pid: int | None
    address: str
    log_file: Path


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(HOST)
        if port not in ports:
            ports.append(port)
    return ports


class LocalKafkaCluster:
    """Start, reuse, report and stop the local Kafka cluster of one state directory."""

    def __init__(
        self,
        state_dir: Path,
        cache_dir: Path,
        *,
        brokers: int = 3,
        version: str = KAFKA_VERSION,
        kafka_home: Path | None = None,
        short_lived: bool = False,
    ) -> None:
        """``short_lived``: brokers for tests (``LocalKafka``'s)."""
        if not 1 <= brokers <= MAX_BROKERS:
            raise ConfigurationError(
                f"a local Kafka cluster has 1 to {MAX_BROKERS} brokers, not {brokers}"
            )
        self.state_dir = state_dir.resolve()
        self.root = self.state_dir / "kafka"
        self.cache_dir = cache_dir
        self.brokers = brokers
        self.version = version
        self.kafka_home = kafka_home
        self.short_lived = short_lived
        self._lock = KafkaLayout(self.root).lock_file  # the single broker's lock: one or other

    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def bootstrap(self) -> str | None:
        """Every broker's address (whether it runs or not); None before the first start."""
        cluster = self._read()
        return cluster.bootstrap if cluster is not None else None

    # -- public API -----------------------------------------------------------------------

    def ensure_running(self, timeout: float = 180.0, *, fresh: bool = False) -> str:
        """The bootstrap addresses of a cluster whose every broker serves requests, starting
        the brokers that do not run; ``fresh`` stops it and deletes its data first."""
        deadline = time.monotonic() + timeout
        with locked(self._lock):
            if fresh:
                self._stop_all(_STOP_TIMEOUT)
                self._wipe()
            cluster = self._read() or self._create()
            nodes = self._nodes(cluster)
            for node in nodes:  # a busy port or missing jars refuse before any broker starts
                node.preflight()
            # Each launch formats its storage first (a JVM run of its own): side by side.
            with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
                started = list(pool.map(LocalKafka.launch, nodes))
            launched = [node for node, new in zip(nodes, started, strict=True) if new]
            try:
                for node in nodes:
                    node.await_ready(deadline)
            except BaseException:
                for node in launched:
                    node.stop(timeout=10.0)
                raise
            return cluster.bootstrap

    def start(self, timeout: float = 180.0) -> str:
        """Start again after ``stop()``: same ports, same data."""
        return self.ensure_running(timeout)

    def broker(self, node_id: int) -> LocalKafka:
        """Node ``node_id``'s own manager (1-based), to stop, kill, pause or resume it alone."""
        cluster = self._read()
        if cluster is None:
            raise ConfigurationError(f"no local Kafka cluster in {self.root}: start it first")
        for node in self._nodes(cluster):
            if node.node_id == node_id:
                return node
        raise ConfigurationError(
            f"the local Kafka cluster has brokers {[n.node_id for n in cluster.nodes]}, "
            f"not {node_id}"
        )

    def node_status(self) -> list[NodeStatus]:
        cluster = self._read()
        if cluster is None:
            return []
        out: list[NodeStatus] = []
        for node, spec in zip(self._nodes(cluster), cluster.nodes, strict=True):
            status = node.status()
            out.append(
                NodeStatus(spec.node_id, status.running, status.pid, spec.address, status.log_file)
            )
        return out

    def status(self) -> KafkaStatus:
        """Running while at least one broker serves (clients find it through the bootstrap
        list); ``node_status`` tells which."""
        cluster = self._read()
        nodes = self.node_status()
        running = [n for n in nodes if n.running]
        return KafkaStatus(
            running=bool(running),
            pid=running[0].pid if running else None,
            bootstrap=cluster.bootstrap if cluster is not None and running else None,
            version=cluster.version if cluster is not None else self.version,
            log_file=self.root / "broker-*" / "logs" / "server.log",
        )

    def stop(self, timeout: float = _STOP_TIMEOUT, *, wipe: bool = False) -> None:
        """SIGTERM every broker at once, SIGKILL after ``timeout``; data kept unless ``wipe``."""
        with locked(self._lock):
            self._stop_all(timeout)
            if wipe:
                self._wipe()

    # -- internals ------------------------------------------------------------------------

    def _read(self) -> ClusterFile | None:
        try:
            text = self.cluster_file.read_text(encoding="utf-8")
        except OSError:
            return None
        cluster = parse_cluster_file(text)
        if cluster is None:
            raise ConfigurationError(
                f"{self.cluster_file} is not a cluster file spectral wrote; start over with "
                "`spectral dev down --wipe`."
            )
        if len(cluster.nodes) != self.brokers:
            raise ConfigurationError(
                f"the local Kafka cluster in {self.root} has {len(cluster.nodes)} brokers, not "
                f"{self.brokers}: use it as it is (`spectral dev up` without --brokers) or start "
                "over with `spectral dev down --wipe`."
            )
        return cluster

    def _create(self) -> ClusterFile:
        ports = _free_ports(2 * self.brokers)
        nodes = tuple(
            QuorumNode(i + 1, KafkaPorts(broker=ports[2 * i], controller=ports[2 * i + 1]))
            for i in range(self.brokers)
        )
        cluster = ClusterFile(self.version, new_cluster_id(), nodes)
        self.root.mkdir(parents=True, exist_ok=True)
        temporary = self.cluster_file.with_suffix(".tmp")
        temporary.write_text(cluster.to_json(), encoding="utf-8")
        temporary.replace(self.cluster_file)
        return cluster

    def _nodes(self, cluster: ClusterFile) -> list[LocalKafka]:
        return [
            LocalKafka(
                self.state_dir,
                self.cache_dir,
                version=cluster.version,
                kafka_home=self.kafka_home,
                member=ClusterMember(node, cluster.nodes, cluster.cluster_id),
                layout_root=self.root / f"broker-{node.node_id}",
                short_lived=self.short_lived,
            )
            for node in cluster.nodes
        ]

    def _stop_all(self, timeout: float) -> None:
        try:
            cluster = self._read()
        except ConfigurationError:
            cluster = None
        if cluster is None:
            return
        nodes = self._nodes(cluster)
        for node in nodes:
            node.request_stop()
        deadline = time.monotonic() + timeout
        for node in nodes:  # they shut down together; each wait only overlaps the others
            node.stop(timeout=max(1.0, deadline - time.monotonic()))

    def _wipe(self) -> None:
        for path in self.root.glob("broker-*"):
            shutil.rmtree(path, ignore_errors=True)
        self.cluster_file.unlink(missing_ok=True)


def local_kafka(
    state_dir: Path, cache_dir: Path, brokers: int | None = None
) -> LocalKafka | LocalKafkaCluster:
    """The local Kafka of ``state_dir``: the cluster it holds, else its single broker; with
    ``brokers``, a directory that holds neither gets that many (1: the single broker). Asking
    for another number than the directory holds is refused."""
    root = state_dir.resolve() / "kafka"
    if (root / "cluster.json").exists():
        cluster = parse_cluster_file((root / "cluster.json").read_text(encoding="utf-8"))
        existing = len(cluster.nodes) if cluster is not None else brokers or 3
        if brokers is not None and brokers != existing:
            raise _mismatch(root, existing, brokers)
        return LocalKafkaCluster(state_dir, cache_dir, brokers=existing)
    single = KafkaLayout(root)
    if single.state_file.exists() or single.meta_properties.exists():
        if brokers not in {None, 1}:
            raise _mismatch(root, 1, brokers or 1)
        return LocalKafka(state_dir, cache_dir)
    if brokers is None or brokers == 1:
        return LocalKafka(state_dir, cache_dir)
    return LocalKafkaCluster(state_dir, cache_dir, brokers=brokers)


def _mismatch(root: Path, existing: int, wanted: int) -> ConfigurationError:
    what = "a single Kafka broker" if existing == 1 else f"a {existing}-broker Kafka cluster"
    asked = "a single broker" if wanted == 1 else f"{wanted} brokers"
    return ConfigurationError(
        f"{root} holds {what}, not {asked}. Use it as it is (`spectral dev up` "
        "without --brokers), start over with `spectral dev down --wipe` (deletes the stack's "
        "data), or give the other stack its own state directory (SPECTRAL_STATE_DIR)."
    )
