"""A private PostgreSQL cluster for the local stack.

``initdb`` into a data directory of this checkout's stack, started with ``pg_ctl`` on a free
loopback port, password authentication (scram) with a generated password kept in a 0600 file.
The server refuses to run as root, so when this process is root every server command runs as
the ``postgres`` OS user (``runuser``) and the data directory lives where that user can reach it.

The server listens on the loopback port and on a Unix-domain socket beside its data directory;
the URL the stack hands out connects through the socket (no TCP work on either side of a round
trip: 2-4 % of the server's CPU under the benchmark's load). A URL naming 127.0.0.1 and the
port keeps working, as does any TCP client. A socket path longer than the system allows
(:data:`spectral.settings.SOCKET_PATH_MAX`) stops ``ensure_running`` with the way out: a
shorter ``SPECTRAL_STATE_DIR``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from hashlib import sha1
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from spectral.devstack.ports import free_port, port_answers, port_is_free
from spectral.devstack.process import locked, pid_alive, terminate
from spectral.errors import ConfigurationError, TransientError
from spectral.settings import (
    check_socket_path,
    socket_directory,
    socket_path,
    socket_url,
    url_port,
)

SHARED_ROOT = Path("/var/lib/spectral")
"""Where root keeps the clusters (the postgres OS user cannot reach a checkout under /root)."""
OWNER_FILE = "owner"
LOG_ROTATE_BYTES = 10 * 1024 * 1024
HOST = "127.0.0.1"
SUPERUSER = "postgres"
DATABASE = "spectral"
_SERVER_CONF = {
    "listen_addresses": f"'{HOST}'",
    "unix_socket_directories": "''",
    "max_connections": "300",
    "shared_buffers": "'256MB'",
    "work_mem": "'16MB'",
    "max_wal_size": "'2GB'",
    "checkpoint_timeout": "'15min'",
    "log_min_messages": "warning",
    "log_statement": "'none'",
    "timezone": "'UTC'",
}


@dataclass(frozen=True)
class PostgresStatus:
    running: bool
    pid: int | None
    port: int | None
    data_dir: Path
    log_file: Path
    url: str | None


def find_bin_dir() -> Path:
    """The newest Debian PostgreSQL server binaries, or those on PATH."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if candidates:
        return candidates[-1].parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    raise ConfigurationError(
        "PostgreSQL server binaries (initdb, pg_ctl) were not found. Install them with "
        "`apt-get update && apt-get install -y postgresql` (`make` does this for you), or point "
        "SPECTRAL_DATABASE_URL at an existing server."
    )


class LocalPostgres:
    """Start, reuse, report and stop this checkout's private PostgreSQL cluster."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir.resolve()
        self._state_file = self.state_dir / "postgres.json"
        self._password_file = self.state_dir / "postgres.password"
        self._as_root = os.geteuid() == 0
        self.data_dir = self._choose_data_dir()
        self.log_file = self.data_dir.parent / "postgres.log"
        self.socket_dir = self.data_dir.parent
        """Where the server's Unix-domain socket lives (the postgres OS user can write there)."""

    # -- public API -----------------------------------------------------------------------

    def ensure_running(self, timeout: float = 60.0) -> str:
        """Start the cluster unless it already runs; return its connection URL. Two callers at
        once (two test workers, two terminals) take turns: the second finds it running."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with locked(self.state_dir / "postgres.lock"):
            return self._ensure_running(timeout)

    def _ensure_running(self, timeout: float) -> str:
        status = self.status()
        if status.running and status.url:
            return status.url
        bin_dir = find_bin_dir()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            check_socket_path(self.socket_dir, 65535)
        except ValueError as exc:
            raise ConfigurationError(
                f"the local PostgreSQL's socket would not fit: {exc}. Set SPECTRAL_STATE_DIR "
                "to a shorter directory, or SPECTRAL_DATABASE_URL to a server of your own."
            ) from exc
        if self.data_dir.exists() and not self._password_file.exists():
            # A cluster left by an earlier checkout at this path whose state directory is gone:
            # nobody knows its password any more. It is ours to replace.
            self.stop(wipe=True)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bin_dir)
        self._record_owner()
        port = self._pick_port()
        self._start(bin_dir, port, timeout)
        self._write_state(port)
        url = self._url(port)
        self._ensure_database(bin_dir, port)
        return url

    def owns(self, url: str) -> bool:
        """Whether ``url`` is this stack's server (the URL ``dev up`` printed for it: its port,
        its socket directory or the loopback address, and its passfile), running or not."""
        port = self._read_state().get("port")
        if not isinstance(port, int):
            return False
        try:  # a URL this cannot read (or a path with a NUL byte) is not this stack's
            parts = urlsplit(url)
            named_port = url_port(url)
            passfile = parse_qs(parts.query).get("passfile", [""])[0]
            directory = socket_directory(url)
            at = parts.hostname == HOST or (
                directory is not None and Path(directory).resolve() == self.socket_dir.resolve()
            )
            return (
                at
                and named_port == port
                and Path(passfile).resolve() == (self.state_dir / "pgpass").resolve()
            )
        except ValueError:
            return False

    def status(self) -> PostgresStatus:
        state = self._read_state()
        port = state.get("port")
        pid = self._postmaster_pid()
        running = pid_alive(pid) and isinstance(port, int) and port_answers(HOST, port)
        return PostgresStatus(
            running=running,
            pid=pid if running else None,
            port=port if isinstance(port, int) else None,
            data_dir=self.data_dir,
            log_file=self.log_file,
            url=self._url(port)
            if running and isinstance(port, int) and self._password_file.exists()
            else None,
        )

    def stop(self, timeout: float = 30.0, *, wipe: bool = False) -> None:
        """Stop the server (fast shutdown, then SIGKILL) and leave no process behind;
        ``wipe`` also deletes the cluster's data (throwaway clusters of fault tests)."""
        self._stop(timeout)
        if wipe:
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)
            for name in ("postgres.json", "postgres.password", "pgpass"):
                (self.state_dir / name).unlink(missing_ok=True)

    def _stop(self, timeout: float) -> None:
        pid = self._postmaster_pid()
        if pid_alive(pid) and pid is not None:
            bin_dir = find_bin_dir()
            self._run(
                [
                    str(bin_dir / "pg_ctl"),
                    "stop",
                    "-D",
                    str(self.data_dir),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    str(int(timeout)),
                ],
                check=False,
            )
            if pid_alive(pid):
                terminate(pid, timeout=5.0)

    def kill(self) -> None:
        """SIGKILL the postmaster (fault tests); its children exit on their own."""
        pid = self._postmaster_pid()
        if pid is not None and pid_alive(pid):
            terminate(pid, timeout=0.0)

    def start(self, timeout: float = 60.0) -> str:
        """Start again on the port it had, keeping its data (fault tests)."""
        port = self._read_state().get("port")
        if not isinstance(port, int):
            return self.ensure_running(timeout)
        if not self.status().running:
            self._start(find_bin_dir(), port, timeout)
        return self._url(port)

    # -- internals ------------------------------------------------------------------------

    def _choose_data_dir(self) -> Path:
        if not self._as_root:
            return self.state_dir / "postgres" / "data"
        # The postgres OS user must own the data directory and reach every parent of it; a
        # checkout under /root is not reachable, so root keeps the cluster under /var/lib.
        digest = sha1(str(self.state_dir).encode(), usedforsecurity=False).hexdigest()[:12]
        return SHARED_ROOT / digest / "data"

    def _record_owner(self) -> None:
        """Note which stack a cluster outside its state directory serves (`dev status` lists
        the clusters whose stack is gone; `dev down --wipe` removes them)."""
        if self.data_dir.parent.parent == SHARED_ROOT:
            with contextlib.suppress(OSError):
                (self.data_dir.parent / OWNER_FILE).write_text(
                    f"{self.state_dir}\n", encoding="utf-8"
                )

    def _run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        if self._as_root:
            argv = ["runuser", "-u", SUPERUSER, "--", *argv]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
        if check and result.returncode != 0:
            raise ConfigurationError(
                f"`{' '.join(argv)}` failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()[-2000:]}"
            )
        return result

    def _password(self) -> str:
        if self._password_file.exists():
            return self._password_file.read_text(encoding="ascii").strip()
        password = secrets.token_urlsafe(18)
        self._password_file.write_text(password + "\n", encoding="ascii")
        self._password_file.chmod(0o600)
        return password

    def _initdb(self, bin_dir: Path) -> None:
        if self._as_root:
            try:
                pwd.getpwnam(SUPERUSER)
            except KeyError as exc:
                raise ConfigurationError(
                    "PostgreSQL refuses to run as root and there is no `postgres` OS user; "
                    "install the server with `apt-get install -y postgresql` (it creates the user)."
                ) from exc
        root = self.data_dir.parent
        root.mkdir(parents=True, exist_ok=True)
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir)
        pwfile = root / "initdb.pw"
        pwfile.write_text(self._password() + "\n", encoding="ascii")
        if self._as_root:
            shutil.chown(root, user=SUPERUSER, group=SUPERUSER)
            shutil.chown(pwfile, user=SUPERUSER, group=SUPERUSER)
        pwfile.chmod(0o600)
        try:
            self._run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    SUPERUSER,
                    "--auth-local=scram-sha-256",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                    "--no-instructions",
                ],
            )
        finally:
            pwfile.unlink(missing_ok=True)
        conf = self.data_dir / "postgresql.conf"
        with conf.open("a", encoding="utf-8") as handle:
            handle.write("\n# spectral local stack\n")
            for key, value in _SERVER_CONF.items():
                handle.write(f"{key} = {value}\n")

    def _pick_port(self) -> int:
        port = self._read_state().get("port")
        if isinstance(port, int) and port_is_free(HOST, port):
            return port
        return free_port(HOST)

    def _start(self, bin_dir: Path, port: int, timeout: float) -> None:
        if not port_is_free(HOST, port):
            raise ConfigurationError(
                f"port {HOST}:{port} is busy; stop whatever listens there or run "
                "`spectral dev down` and `spectral dev up` to pick another port."
            )
        rotate_log(self.log_file)
        if self._as_root and not self.log_file.exists():
            self.log_file.touch()
            shutil.chown(self.log_file, user=SUPERUSER, group=SUPERUSER)
        result = self._run(
            [
                str(bin_dir / "pg_ctl"),
                "start",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-o",
                f"-p {port} -k {shlex.quote(str(self.socket_dir))}",
                "-w",
                "-t",
                str(int(timeout)),
            ],
            check=False,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not port_answers(HOST, port):
            time.sleep(0.1)
        if result.returncode != 0 or not port_answers(HOST, port):
            tail = self._log_tail()
            raise TransientError(
                f"PostgreSQL did not start on {HOST}:{port} (see {self.log_file}):\n{tail}"
            )

    def _ensure_database(self, bin_dir: Path, port: int) -> None:
        env_pw = {"PGPASSWORD": self._password()}
        exists = subprocess.run(  # noqa: S603
            [
                str(bin_dir / "psql"),
                "-h",
                HOST,
                "-p",
                str(port),
                "-U",
                SUPERUSER,
                "-d",
                "postgres",
                "-tAc",
                f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **env_pw},
            check=False,
        )
        if exists.returncode != 0:
            raise TransientError(f"PostgreSQL refused the connection: {exists.stderr.strip()}")
        if exists.stdout.strip() != "1":
            subprocess.run(  # noqa: S603
                [str(bin_dir / "createdb"), "-h", HOST, "-p", str(port), "-U", SUPERUSER, DATABASE],
                capture_output=True,
                text=True,
                env={**os.environ, **env_pw},
                check=True,
            )

    def _postmaster_pid(self) -> int | None:
        try:
            first = (self.data_dir / "postmaster.pid").read_text(encoding="ascii").split("\n", 1)[0]
        except OSError:
            return None
        return int(first) if first.strip().isdigit() else None

    def _url(self, port: int) -> str:
        # The password stays in a 0600 passfile (libpq format); the URL only names the file, so
        # it can be printed, logged and eval'ed without carrying a secret. A socket connection
        # reads the line of its directory (libpq) or of "localhost" (asyncpg).
        passfile = self.state_dir / "pgpass"
        password = self._password()
        socket_host = str(self.socket_dir).replace("\\", "\\\\").replace(":", "\\:")
        lines = "".join(
            f"{host}:*:*:{SUPERUSER}:{password}\n" for host in (HOST, "localhost", socket_host)
        )
        if not passfile.exists() or passfile.read_text(encoding="utf-8") != lines:
            passfile.write_text(lines, encoding="utf-8")
            passfile.chmod(0o600)
        if not Path(socket_path(self.socket_dir, port)).exists():
            # A server started before it listened on a socket: TCP until it is restarted.
            return f"postgresql://{SUPERUSER}@{HOST}:{port}/{DATABASE}?passfile={passfile}"
        return socket_url(SUPERUSER, self.socket_dir, port, DATABASE, passfile=str(passfile))

    def _read_state(self) -> dict[str, object]:
        try:
            data = json.loads(self._state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self, port: int) -> None:
        self._state_file.write_text(
            json.dumps({"port": port, "data_dir": str(self.data_dir)}) + "\n", encoding="utf-8"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(encoding="utf-8").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def rotate_log(path: Path, limit: int = LOG_ROTATE_BYTES) -> bool:
    """Before a start: a log grown past ``limit`` bytes becomes ``<name>.1`` (the one before is
    dropped), so a stack restarted now and then keeps at most twice the limit. Whether it
    rotated."""
    try:
        if path.stat().st_size <= limit:
            return False
        path.replace(path.with_name(path.name + ".1"))
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Orphan:
    """A cluster under :data:`SHARED_ROOT` whose stack (state directory) no longer exists."""

    root: Path
    state_dir: Path
    pid: int | None
    """Its postmaster, still running."""


def orphans(shared_root: Path = SHARED_ROOT) -> list[Orphan]:
    """The clusters of removed checkouts (see :class:`Orphan`); a cluster that names no stack
    (made before stacks recorded theirs) is not listed: nothing tells whose it is."""
    found: list[Orphan] = []
    for owner in sorted(shared_root.glob(f"*/{OWNER_FILE}")):
        try:
            state_dir = Path(owner.read_text(encoding="utf-8").strip())
        except OSError:
            continue
        if not state_dir.is_absolute() or state_dir.exists():
            continue
        pid_file = owner.parent / "data" / "postmaster.pid"
        try:
            first = pid_file.read_text(encoding="ascii").split("\n", 1)[0]
        except OSError:
            first = ""
        pid = int(first) if first.strip().isdigit() and pid_alive(int(first)) else None
        found.append(Orphan(owner.parent, state_dir, pid))
    return found


def wipe_orphan(orphan: Orphan, timeout: float = 30.0) -> None:
    """Stop an orphaned cluster's server (if it runs) and delete the cluster."""
    if orphan.pid is not None:
        bin_dir = find_bin_dir()
        data = str(orphan.root / "data")
        argv = [
            str(bin_dir / "pg_ctl"),
            "stop",
            "-D",
            data,
            "-m",
            "fast",
            "-w",
            "-t",
            str(int(timeout)),
        ]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", SUPERUSER, "--", *argv]
        subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
        if pid_alive(orphan.pid):
            terminate(orphan.pid, timeout=5.0)
    shutil.rmtree(orphan.root, ignore_errors=True)
