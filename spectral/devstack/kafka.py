"""A real local Apache Kafka broker: KRaft, one node that is broker and controller, no Docker.
(A cluster of several such nodes is ``spectral.devstack.kafka_cluster``; each of its nodes is a
``LocalKafka`` given its ``ClusterMember`` place.)

``LocalKafka(state_dir, cache_dir).ensure_running()`` returns ``"127.0.0.1:PORT"`` of a broker that
answers Kafka requests, starting one when needed:

1. jars: ``$KAFKA_HOME/libs`` when KAFKA_HOME is set, else Maven Central via the POM in
   ``spectral/devstack/kafka/`` into ``<cache_dir>/kafka-<version>/libs`` (once; later starts skip
   Maven);
2. ``<state_dir>/kafka/server.properties`` on free loopback ports (remembered in ``state.json`` and
   reused, so a stopped broker comes back on the same bootstrap address with its data);
3. the log directories formatted once with ``kafka.tools.StorageTool format``;
4. ``java ... kafka.Kafka server.properties`` detached in its own session, its pid in
   ``kafka.pid``, its output in ``kafka.out`` and its log in ``logs/server.log``;
5. ready when the broker answers ApiVersions and lists itself in a Metadata response.

A broker made ``short_lived`` (a test's) starts on the C1 compiler and the serial collector, and
maps the classes of Kafka's jars from an archive in ``<cache_dir>/class-archives`` recorded once
by the first such broker as it stops (JDK class data sharing; checked by a JVM that maps it before
any start uses it).

A second call finds the live pid and the answering port and returns at once. ``stop()`` sends
SIGTERM, then SIGKILL after a timeout, and keeps the data unless asked to wipe it. ``kill()``,
``pause()`` and ``resume()`` are for fault tests. Every start, stop and inspection of one state
directory holds an advisory lock, so concurrent callers never start two brokers.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NoReturn

from spectral.devstack.kafka_config import (
    HOST,
    KAFKA_MAIN,
    NODE_ID,
    STORAGE_TOOL_MAIN,
    ClassArchive,
    ClusterMember,
    KafkaLayout,
    KafkaPorts,
    KafkaState,
    class_archive_check,
    class_archive_name,
    jvm_command,
    new_cluster_id,
    parse_state,
    render_log4j1_properties,
    render_server_properties,
    storage_format_args,
)
from spectral.devstack.kafka_jars import (
    KafkaJars,
    default_cache_dir,
    find_java,
    kafka_home_jars,
    maven_jars,
    package_file,
    tail,
)
from spectral.devstack.kafka_probe import probe
from spectral.devstack.ports import free_port, port_answers, port_is_free
from spectral.devstack.process import freeze, locked, pid_alive, terminate, thaw
from spectral.errors import ConfigurationError, TransientError

__all__ = ["KAFKA_VERSION", "KafkaStatus", "LocalKafka", "default_cache_dir"]

KAFKA_VERSION = "4.3.1"
_FORMAT_TIMEOUT = 120.0
_CONSOLE_LIMIT = 10 * 1024 * 1024
_TAIL_LINES = 30
_POLL = 0.25
_PORT_RELEASE = 10.0
_CLASS_ARCHIVES = "class-archives"
# A claim to record the class archive left by a broker that never stopped through this class (the
# test run's reaper SIGKILLs what a killed run left) is taken over after this many seconds.
_RECORDING_STALE = 900.0
_ARCHIVE_CHECK_TIMEOUT = 60.0


@dataclass(frozen=True)
class KafkaStatus:
    running: bool
    pid: int | None
    bootstrap: str | None
    version: str
    log_file: Path


class LocalKafka:
    """Start, reuse, report and stop the local broker of one state directory."""

    # Brokers this process started, kept so their exit status is collected (no zombie, no
    # ResourceWarning) when they stop; keyed by pid.
    _children: ClassVar[dict[int, subprocess.Popen[bytes]]] = {}

    def __init__(
        self,
        state_dir: Path,
        cache_dir: Path,
        *,
        version: str = KAFKA_VERSION,
        kafka_home: Path | None = None,
        port: int | None = None,
        member: ClusterMember | None = None,
        layout_root: Path | None = None,
        short_lived: bool = False,
    ) -> None:
        """``short_lived``: a broker for a test or a few, started on about half the CPU and
        slower once running (``kafka_config.jvm_command``); never the stack of a checkout or a
        benchmark."""
        self.layout = KafkaLayout((layout_root or state_dir / "kafka").resolve())
        self.member = member
        self.node_id = member.node.node_id if member is not None else NODE_ID
        self.cache_dir = cache_dir.expanduser().resolve()
        self.version = version
        home = kafka_home or (
            Path(os.environ["KAFKA_HOME"]) if os.environ.get("KAFKA_HOME") else None
        )
        self.kafka_home = home.expanduser().resolve() if home else None
        self.port = port
        self.short_lived = short_lived

    # -- public API -----------------------------------------------------------------------

    def ensure_running(self, timeout: float = 120.0, *, fresh: bool = False) -> str:
        """The bootstrap address of a broker that serves requests, starting one if needed.

        ``fresh`` stops a running broker and deletes its data and remembered ports first."""
        deadline = time.monotonic() + timeout
        with locked(self.layout.lock_file):
            if fresh:
                self._stop_locked(timeout=30.0)
                self._wipe_locked()
            state = self._read_state()
            pid = self._running_pid()
            if pid is not None:
                if state is not None:
                    self._wait_ready(state, pid, deadline, started_here=False)
                    return state.bootstrap
                self._stop_locked(timeout=30.0)  # a broker whose port we no longer know
            self._forget_pid(state)
            return self._start_locked(state, deadline)

    def start(self, timeout: float = 120.0) -> str:
        """Start again after ``stop()`` or ``kill()``: same port, same data (fault tests)."""
        return self.ensure_running(timeout)

    def status(self) -> KafkaStatus:
        state = self._read_state()
        pid = self._running_pid()
        running = state is not None and pid is not None and port_answers(HOST, state.port)
        return KafkaStatus(
            running=running,
            pid=pid if running else None,
            bootstrap=state.bootstrap if running and state is not None else None,
            version=state.version if state is not None else self._expected_version(),
            log_file=self.layout.log_file,
        )

    @property
    def bootstrap(self) -> str | None:
        """The broker's address (whether it runs or not); None before the first start."""
        state = self._read_state()
        return state.bootstrap if state is not None else None

    def stop(self, timeout: float = 30.0, *, wipe: bool = False) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after ``timeout``; data is kept unless ``wipe``."""
        with locked(self.layout.lock_file):
            self._stop_locked(timeout)
            if wipe:
                self._wipe_locked()

    def request_stop(self) -> None:
        """SIGTERM without waiting (a cluster stops all its brokers at once, then waits)."""
        with locked(self.layout.lock_file):
            pid = self._running_pid()
            if pid is None:
                return
            try:
                os.kill(pid, signal.SIGCONT)  # a paused broker cannot act on SIGTERM
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return

    def kill(self) -> None:
        """SIGKILL the broker, as a crash would; ``start()`` recovers its logs (fault tests)."""
        with locked(self.layout.lock_file):
            self._stop_locked(timeout=0.0, signal_first=signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP the broker and return once every thread of it stopped: connections stay
        open, nothing answers (fault tests)."""
        self._signal_running(freeze)

    def resume(self) -> None:
        """SIGCONT a paused broker and return once it runs again."""
        self._signal_running(thaw)

    # -- start ----------------------------------------------------------------------------

    def preflight(self) -> None:
        """What a start needs before anything is launched, checked without starting anything:
        a cluster's node its two ports free, every broker its jars (fetched once)."""
        with locked(self.layout.lock_file):
            if self._running_pid() is not None:
                return
            if self.member is not None:
                self._member_ports(self.member)
        self._jars()

    def launch(self) -> bool:
        """Start the broker's process without waiting for it to serve; False when it already
        runs. A node of a multi-node cluster becomes ready only once a majority of the
        controllers runs, so a cluster launches every node first and then waits for each
        (:meth:`await_ready`)."""
        with locked(self.layout.lock_file):
            if self._running_pid() is not None:
                return False
            state = self._read_state()
            self._forget_pid(state)
            self._spawn_locked(state)
            return True

    def await_ready(self, deadline: float) -> str:
        """Wait until the launched broker serves requests (stopping it if it never does)."""
        state = self._read_state()
        pid = self._running_pid()
        if state is None or pid is None:
            raise TransientError(f"No local Kafka broker runs for {self.layout.root}.")
        try:
            self._wait_ready(state, pid, deadline, started_here=True)
        except BaseException:
            self.stop(timeout=10.0)
            raise
        return state.bootstrap

    def _start_locked(self, state: KafkaState | None, deadline: float) -> str:
        state, pid = self._spawn_locked(state)
        try:
            self._wait_ready(state, pid, deadline, started_here=True)
        except BaseException:
            self._stop_locked(timeout=10.0)
            raise
        return state.bootstrap

    def _spawn_locked(self, state: KafkaState | None) -> tuple[KafkaState, int]:
        ports = self._choose_ports(state)
        jars = self._jars()
        java = find_java(jars.version)
        layout = self.layout
        for directory in (layout.root, layout.data_dir, layout.logs_dir):
            directory.mkdir(parents=True, exist_ok=True)
        formatted = layout.meta_properties.is_file()
        if formatted:
            cluster_id = self._cluster_id(state)
        else:
            cluster_id = self.member.cluster_id if self.member else new_cluster_id()
        state = KafkaState(
            version=jars.version,
            port=ports.broker,
            controller_port=ports.controller,
            cluster_id=cluster_id,
        )
        layout.properties.write_text(
            render_server_properties(
                ports,
                layout.data_dir,
                node_id=self.node_id,
                quorum=self.member.quorum if self.member else (),
            ),
            encoding="utf-8",
        )
        log_config = self._write_log_config(jars)
        self._settle_recording()  # left by a broker that was not stopped through this class
        if not formatted:
            self._format(java, jars, cluster_id, log_config)
        self._write_state(state)
        pid = self._launch(java, jars, log_config)
        state = state.with_pid(pid)
        layout.pid_file.write_text(f"{pid}\n", encoding="ascii")
        self._write_state(state)
        return state, pid

    def _jars(self) -> KafkaJars:
        if self.kafka_home is not None:
            return kafka_home_jars(self.kafka_home)
        return maven_jars(self.cache_dir, self.version)

    def _expected_version(self) -> str:
        if self.kafka_home is not None:
            try:
                return kafka_home_jars(self.kafka_home).version
            except ConfigurationError:
                return self.version
        return self.version

    def _choose_ports(self, state: KafkaState | None) -> KafkaPorts:
        if self.member is not None:
            return self._member_ports(self.member)
        wanted = self.port or (state.port if state is not None else None)
        if wanted is not None:
            if not _port_frees(wanted, _PORT_RELEASE):
                raise ConfigurationError(
                    f"Port {HOST}:{wanted} for the local Kafka broker is busy (another process "
                    f"listens on it). Stop that process (`ss -ltnp 'sport = :{wanted}'` names it), "
                    f"or delete {self.layout.state_file} to start on a new free port (the data is "
                    "kept)."
                )
            broker = wanted
        else:
            broker = free_port(HOST)
        controller = state.controller_port if state is not None else None
        # A static quorum keeps the voter's address in server.properties, so the controller may
        # move to another port when its old one is taken.
        if controller is None or controller == broker or not port_is_free(HOST, controller):
            controller = free_port(HOST)
            while controller == broker:
                controller = free_port(HOST)
        return KafkaPorts(broker=broker, controller=controller)

    def _member_ports(self, member: ClusterMember) -> KafkaPorts:
        """A cluster's node keeps its ports for good: the other voters know it by them."""
        ports = member.node.ports
        for port in (ports.broker, ports.controller):
            if not _port_frees(port, _PORT_RELEASE):
                raise ConfigurationError(
                    f"Port {HOST}:{port} of local Kafka broker {member.node.node_id} is busy "
                    f"(another process listens on it: `ss -ltnp 'sport = :{port}'` names it). "
                    "The other brokers of the cluster know the broker by its ports, so stop that "
                    "process, or start the cluster over on new ports with empty storage "
                    "(`spectral dev down --wipe`)."
                )
        return ports

    def _cluster_id(self, state: KafkaState | None) -> str:
        """The cluster id the existing log directories were formatted with."""
        try:
            lines = self.layout.meta_properties.read_text(encoding="utf-8").splitlines()
        except OSError:
            lines = []
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id" and value.strip():
                return value.strip()
        return state.cluster_id if state is not None else new_cluster_id()

    def _write_log_config(self, jars: KafkaJars) -> Path:
        if jars.log4j2:
            path = self.layout.log4j2_config
            path.write_bytes(package_file("log4j2.xml"))
        else:
            path = self.layout.log4j1_config
            path.write_text(render_log4j1_properties(), encoding="utf-8")
        return path

    def _format(self, java: str, jars: KafkaJars, cluster_id: str, log_config: Path) -> None:
        command = jvm_command(
            java,
            jars.libs_dir,
            STORAGE_TOOL_MAIN,
            storage_format_args(self.layout.properties, cluster_id),
            logs_dir=self.layout.logs_dir,
            log_config=log_config,
            short_lived=True,  # a tool that runs for a second, whatever broker it formats for
            class_archive=self._class_archive(java, jars, record=False),
        )
        try:
            done = subprocess.run(  # noqa: S603 - our java, our arguments
                command,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                cwd=self.layout.root,
                timeout=_FORMAT_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise TransientError(
                f"Formatting the Kafka storage in {self.layout.data_dir} took more than "
                f"{_FORMAT_TIMEOUT:.0f} s; see {self.layout.log_file}."
            ) from exc
        if done.returncode != 0 or not self.layout.meta_properties.is_file():
            output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-_TAIL_LINES:])
            raise ConfigurationError(
                f"Formatting the Kafka storage failed (exit {done.returncode}): "
                f"{' '.join(command[-6:])}\n{output}\nDelete {self.layout.root} (or start with "
                "fresh=True / `spectral dev down --wipe`) and try again."
            )

    def _launch(self, java: str, jars: KafkaJars, log_config: Path) -> int:
        archive = self._class_archive(java, jars, record=True) if self.short_lived else None
        command = jvm_command(
            java,
            jars.libs_dir,
            KAFKA_MAIN,
            [str(self.layout.properties)],
            logs_dir=self.layout.logs_dir,
            log_config=log_config,
            short_lived=self.short_lived,
            class_archive=archive,
        )
        if archive is not None and archive.record:
            note = f"{archive.path}\n{java}\n{command[command.index('-cp') + 1]}\n"
            self.layout.class_archive_note.write_text(note, encoding="utf-8")
        console = self.layout.console_file
        if console.is_file() and console.stat().st_size > _CONSOLE_LIMIT:
            console.unlink()
        with console.open("ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S%z')} {' '.join(command)}\n".encode())
            out.flush()
            child = subprocess.Popen(  # noqa: S603 - our java, our arguments
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.layout.root,
                start_new_session=True,
            )
        self._children[child.pid] = child
        return child.pid

    def _wait_ready(
        self, state: KafkaState, pid: int, deadline: float, *, started_here: bool
    ) -> None:
        last = "no answer yet"
        while True:
            if not pid_alive(pid):
                self._reap(pid)
                self._raise_not_up(
                    state, f"the broker (pid {pid}) exited", started_here=started_here
                )
            result = probe(HOST, state.port, self.node_id)
            if result.ready:
                return
            last = result.detail
            if time.monotonic() >= deadline:
                self._raise_not_up(
                    state,
                    f"the broker (pid {pid}) did not answer on {state.bootstrap} in time ({last})",
                    started_here=started_here,
                )
            time.sleep(_POLL)

    def _raise_not_up(self, state: KafkaState, what: str, *, started_here: bool) -> NoReturn:
        layout = self.layout
        log = tail(layout.log_file, _TAIL_LINES // 2)
        console = self._console_of_last_launch()
        if "Address already in use" in log + console:
            raise ConfigurationError(
                f"The local Kafka broker could not listen on {state.bootstrap} or its controller "
                f"port {state.controller_port}: the port is busy. Stop the process using it, or "
                f"delete {layout.state_file} to pick new free ports. Log: {layout.log_file}"
            )
        remedy = (
            "Read the log for the cause; `spectral dev down --wipe` (or fresh=True) starts over "
            "with empty storage."
            if started_here
            else f"Stop it (`spectral dev down`, or kill the pid in {layout.pid_file}) and retry."
        )
        raise TransientError(
            f"Kafka did not come up: {what}. {remedy}\n"
            f"Output of the JVM ({layout.console_file}):\n{console}\n"
            f"Last lines of the broker's log {layout.log_file}:\n{log}"
        )

    def _console_of_last_launch(self) -> str:
        """What the JVM printed since the last launch (fatal errors land here), without the
        launch's own header line."""
        lines = tail(self.layout.console_file, 200).splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("--- ")]
        since = lines[starts[-1] + 1 :] if starts else lines
        return "\n".join(since[:_TAIL_LINES]) if since else "(nothing)"

    # -- stop -----------------------------------------------------------------------------

    def _stop_locked(self, timeout: float, signal_first: signal.Signals = signal.SIGTERM) -> None:
        pid = self._running_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)  # a paused broker cannot act on SIGTERM
                if signal_first is signal.SIGKILL:
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            terminate(pid, timeout)
            self._reap(pid)
        self._settle_recording()
        state = self._read_state()
        self._forget_pid(state)
        if pid is not None and state is not None:
            # The pid is gone before the kernel has closed all of a killed JVM's sockets; a
            # start right after a stop must find the ports free.
            _port_frees(state.port, _PORT_RELEASE)
            _port_frees(state.controller_port, _PORT_RELEASE)

    # -- class archive of short-lived JVMs (kafka_config.ClassArchive) ---------------------

    def _class_archive(self, java: str, jars: KafkaJars, *, record: bool) -> ClassArchive | None:
        """The archive of this JDK's and these jars' classes when one was recorded; else, with
        ``record``, a claim to record it as this broker exits (one broker records at a time)."""
        try:
            path = self._class_archive_path(java, jars)
            if path.is_file():
                return ClassArchive(path)
            if not record:
                return None
            claim = path.with_suffix(".part")
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                if time.time() - claim.stat().st_mtime > _RECORDING_STALE:
                    claim.unlink()
            except FileNotFoundError:
                pass
            claim.touch(exist_ok=False)
        except OSError:  # another broker records it (FileExistsError), or no cache to write to
            return None
        return ClassArchive(claim, record=True)

    def _class_archive_path(self, java: str, jars: KafkaJars) -> Path:
        executable = Path(java).resolve()
        home = executable.parent.parent
        stamps = [str(executable), str(jars.libs_dir)]
        runtime = (home / "lib" / "modules", home / "lib" / "server" / "libjvm.so")
        for path in (*runtime, *sorted(jars.libs_dir.glob("*.jar"))):
            try:
                stat = path.stat()
            except OSError:
                continue
            stamps.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
        return self.cache_dir / _CLASS_ARCHIVES / class_archive_name(jars.version, stamps)

    def _settle_recording(self) -> None:
        """Once the broker that recorded the class archive is gone: publish the archive when a
        JVM maps it, else drop it (a SIGKILL records nothing; a kill while writing tears it)."""
        note = self.layout.class_archive_note
        try:
            recorded, java, classpath = note.read_text(encoding="utf-8").splitlines()
        except (OSError, ValueError):
            note.unlink(missing_ok=True)
            return
        if self._running_pid() is not None:
            return  # still recording
        note.unlink(missing_ok=True)
        part = Path(recorded)
        try:
            if part.stat().st_size > 0 and _maps(java, classpath, part):
                part.replace(part.with_suffix(".jsa"))
        except OSError:
            pass
        finally:
            part.unlink(missing_ok=True)

    def _wipe_locked(self) -> None:
        for path in (self.layout.data_dir, self.layout.logs_dir):
            shutil.rmtree(path, ignore_errors=True)
        for path in (self.layout.state_file, self.layout.properties, self.layout.console_file):
            path.unlink(missing_ok=True)

    def _signal_running(self, send: Callable[[int], None]) -> None:
        with locked(self.layout.lock_file):
            pid = self._running_pid()
            if pid is None:
                raise TransientError(
                    f"No local Kafka broker runs for {self.layout.root}; start it first."
                )
            send(pid)

    def _reap(self, pid: int) -> None:
        child = self._children.pop(pid, None)
        if child is not None:
            try:
                child.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self._children[pid] = child

    # -- state ----------------------------------------------------------------------------

    def _read_state(self) -> KafkaState | None:
        try:
            text = self.layout.state_file.read_text(encoding="utf-8")
        except OSError:
            return None
        return parse_state(text)

    def _write_state(self, state: KafkaState) -> None:
        temporary = self.layout.state_file.with_suffix(".tmp")
        temporary.write_text(state.to_json(), encoding="utf-8")
        temporary.replace(self.layout.state_file)

    def _forget_pid(self, state: KafkaState | None) -> None:
        self.layout.pid_file.unlink(missing_ok=True)
        if state is not None and state.pid is not None:
            self._write_state(state.with_pid(None))

    def _running_pid(self) -> int | None:
        """The pid in kafka.pid when that process lives and is this directory's broker."""
        try:
            pid = int(self.layout.pid_file.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None
        if not pid_alive(pid):
            self._reap(pid)
            return None
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        ours = KAFKA_MAIN.encode() in argv and str(self.layout.properties).encode() in argv
        return pid if ours else None


def _maps(java: str, classpath: str, archive: Path) -> bool:
    """Whether a JVM maps ``archive`` (a torn one crashes it: no error file, no core dump)."""
    command = class_archive_check(java, classpath, archive)
    command[1:1] = ["-XX:ErrorFile=/dev/null", "-XX:-CreateCoredumpOnCrash"]
    try:
        done = subprocess.run(  # noqa: S603 - our java, our arguments
            command,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=_ARCHIVE_CHECK_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and "sharing" in done.stderr


def _port_frees(port: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``port`` to become bindable on the loopback address."""
    deadline = time.monotonic() + timeout
    while not port_is_free(HOST, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
