"""The chart's manifests run, on the real Kafka and PostgreSQL: what `helm template` renders is
carried out the way the kubelet would — the setup hook's steps in order (the migrations as the
owner, its login script with psql, `topics apply`), then every deployment's container args with
exactly its rendered environment (Secret references resolved from the rendered Secret), on a
read-only root filesystem with only its volume mounts writable — and each process, acting as its
own login, answers its startup, liveness and readiness probes on the ports its manifest names,
then stops cleanly on SIGTERM. The maintenance CronJob's pass runs
once. Nothing of the test's own environment reaches the processes but PATH.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import httpx
import pytest

from spectral.settings import url_port
from tests.helm.chart import ROOT, Container, containers, of_kind, render
from tests.support import eventually, unique_name

pytestmark = pytest.mark.integration

SPECTRAL = str(Path(sys.executable).with_name("spectral"))
OWNER_SECRET = "spectral-db-owner"  # noqa: S105 - the name of a Secret
UVICORN = {"api", "mcp"}
LOGIN_VALUES = {
    # the chart's values key of each login (names made unique: logins are server-wide)
    "relay": "relay.login.name",
    "rule-candidates": "consumers.rule-candidates.login.name",
    "work-executor": "consumers.work-executor.login.name",
    "clusters-tick": "clustersTick.login.name",
    "api": "api.login.name",
    "maintenance": "maintenance.login.name",
}
DEFAULT_LOGINS = {
    "relay": "spectral_relay_login",
    "rule-candidates": "spectral_projector_login",
    "work-executor": "spectral_executor_login",
    "clusters-tick": "spectral_producer_login",
    "api": "spectral_api_login",
    "maintenance": "spectral_maintainer_login",
}


def _psql() -> str:
    found = shutil.which("psql") or next(
        iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/psql"), reverse=True)), None
    )
    assert found, "psql is needed (Debian's postgresql package: make test installs it)"
    return str(found)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Release:
    manifests: list[dict[str, Any]]
    secrets: dict[str, dict[str, str]]
    logins: dict[str, str]
    owner_url: str

    def env_of(self, container: Container) -> dict[str, str]:
        """The container's environment as the kubelet gives it, plus PATH."""
        env = {"PATH": os.environ["PATH"]}
        for name, var in container.env.items():
            if "value" in var:
                env[name] = var["value"]
            else:
                ref = var["valueFrom"]["secretKeyRef"]
                env[name] = self.secrets[ref["name"]][ref["key"]]
        return env


@pytest.fixture
async def release(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> AsyncIterator[Release]:
    """The chart rendered for this test's database, broker and topic prefix (MCP on, every
    login named uniquely); its logins are dropped afterwards."""
    parts = urlsplit(database_url)
    suffix = unique_name("_")
    logins = {name: f"{login}{suffix}" for name, login in DEFAULT_LOGINS.items()}
    sets = {
        "kafka.bootstrap": kafka_bootstrap,
        "kafka.topicPrefix": topic_prefix,
        # The chart reaches its server over TCP; the test's server (a socket URL's included:
        # the local stack listens on both) answers on the loopback.
        "database.host": parts.hostname or "127.0.0.1",
        "database.port": str(url_port(database_url)),
        "database.name": parts.path.lstrip("/"),
        "database.owner.secretName": OWNER_SECRET,
        "mcp.enabled": "true",
    } | {LOGIN_VALUES[name]: login for name, login in logins.items()}
    manifests = render([], sets)
    secrets = {
        name: {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
        for name, secret in of_kind(manifests, "Secret").items()
    }
    secrets[OWNER_SECRET] = {"url": database_url}
    try:
        yield Release(manifests, secrets, logins, database_url)
    finally:
        conn = await asyncpg.connect(database_url)
        try:
            for login in logins.values():
                await conn.execute(f'DROP ROLE IF EXISTS "{login}"')
        finally:
            await conn.close()


async def _run(command: list[str], env: Mapping[str, str], timeout: float = 120) -> str:
    proc = await asyncio.create_subprocess_exec(
        *command, env=dict(env), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, f"{command}: exit {proc.returncode}\n{text[-3000:]}"
    assert "permission denied" not in text, text[-3000:]
    return text


async def _setup(release: Release, tmp_path: Path) -> None:
    """The setup hook's Job: each container in order, as it is rendered."""
    steps = [c for c in containers(release.manifests) if c.kind == "Job"]
    assert [(c.spec["name"], c.init) for c in steps] == [
        ("migrate", True),
        ("logins", True),
        ("topics", False),
    ]
    config = next(iter(of_kind(release.manifests, "ConfigMap").values()))
    sql = tmp_path / "sql"
    sql.mkdir()
    (sql / "logins.sql").write_text(config["data"]["logins.sql"])
    logins_dir = tmp_path / "logins"
    logins_dir.mkdir()
    [logins_secret] = [s for name, s in release.secrets.items() if name.endswith("-logins")]
    for key, value in logins_secret.items():
        (logins_dir / key).write_text(value)
    for step in steps:
        env = release.env_of(step)
        if step.spec["name"] == "logins":
            script = step.spec["command"][-1].replace("/logins/", f"{logins_dir}/")
            script = script.replace("/sql/", f"{sql}/")
            env["PATH"] = f"{Path(_psql()).parent}:{env['PATH']}"
            passfile = parse_qs(urlsplit(release.owner_url).query).get("passfile")
            if passfile:
                env["PGPASSFILE"] = passfile[0]
            for _ in range(2):  # a second upgrade's hook changes nothing and does not fail
                await _run([*step.spec["command"][:-1], script], env)
        else:
            await _run([SPECTRAL, *step.spec["args"]], env)


@dataclass
class Running:
    container: Container
    proc: asyncio.subprocess.Process
    ports: dict[int, int]
    """containerPort -> the port it listens on here"""


def _local(container: Container, volumes: Path) -> tuple[list[str], dict[int, int], dict[str, str]]:
    """The container's command with its ports moved to free local ones, and the directories
    that stand for its volume mounts (under ``volumes``)."""
    args = list(container.spec["args"])
    ports = {}
    for declared in container.spec.get("ports", []):
        port = int(declared["containerPort"])
        ports[port] = _free_port()
        for at, arg in enumerate(args):
            if arg == str(port) and at and args[at - 1] in {"--port", "--metrics-port"}:
                args[at] = str(ports[port])
    mounts = {
        str(m["mountPath"]): str(volumes / container.workload / m["name"])
        for m in container.spec.get("volumeMounts", [])
    }
    for path in mounts.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    return [SPECTRAL, *args], ports, mounts


def _read_only_root(command: list[str], mounts: dict[str, str]) -> list[str]:
    """``command`` as a container with ``readOnlyRootFilesystem`` runs it: in a mount namespace
    of its own where the root filesystem is read-only and only its volume mounts are writable
    (each a directory under /dev/shm, a filesystem of its own; the pod's /tmp bound on /tmp)."""
    script = "set -e; "
    if "/tmp" in mounts:  # noqa: S108 - the pod's emptyDir mount point
        pod_tmp = Path(mounts["/tmp"])  # noqa: S108
        if ROOT.is_relative_to("/tmp"):  # noqa: S108
            # A checkout under /tmp (its virtual environment included) stays where it is, read
            # only, as the image's installed files would be, over the pod's /tmp.
            inner = pod_tmp / ROOT.relative_to("/tmp")  # noqa: S108
            script += f'mkdir -p "{inner}"; mount --bind "{ROOT}" "{inner}"; '
            script += f'mount -o remount,bind,ro "{inner}"; '
        script += f'mount --rbind "{pod_tmp}" /tmp; '
    script += 'mount -o remount,bind,ro /; exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command]


@pytest.fixture
def volumes() -> Iterator[Path]:
    """Where the test's stand-ins for volume mounts live: /dev/shm, not under the root
    filesystem the processes see read-only."""
    root = Path("/dev/shm") / unique_name("spectral-chart-")  # noqa: S108 - a unique name
    root.mkdir()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_the_read_only_root_stands_as_in_a_pod(volumes: Path) -> None:
    """The harness can fail: under it, writing outside the mounts is refused."""
    outside = ROOT / "build" / unique_name("written-")
    inside = volumes / "tmp" / "written"
    (volumes / "tmp").mkdir()
    command = _read_only_root(
        ["sh", "-c", f'touch /tmp/written; touch "{outside}" || echo refused'],
        {"/tmp": str(volumes / "tmp")},  # noqa: S108
    )
    proc = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    assert b"refused" in out
    assert inside.exists()
    assert not outside.exists()


async def _start(release: Release, container: Container, volumes: Path) -> Running:
    """The container's process, on a read-only root, its environment's paths moved with its
    mounts."""
    command, ports, mounts = _local(container, volumes)
    env = release.env_of(container)
    for name, value in env.items():
        for mount, local in mounts.items():
            if value == mount or value.startswith(f"{mount}/"):
                env[name] = value.replace(mount, local, 1)
    proc = await asyncio.create_subprocess_exec(
        *_read_only_root(command, mounts),
        env=env,
        cwd="/",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    return Running(container, proc, ports)


async def _probe(client: httpx.AsyncClient, running: Running, probe: dict[str, Any]) -> bool:
    if running.proc.returncode is not None:
        out = await running.proc.stdout.read() if running.proc.stdout else b""
        pytest.fail(f"{running.container.workload} exited:\n{out.decode()[-3000:]}")
    if "httpGet" in probe:
        port = running.ports[running.container.port(probe["httpGet"]["port"])]
        with contextlib.suppress(httpx.HTTPError):
            url = f"http://127.0.0.1:{port}{probe['httpGet']['path']}"
            return (await client.get(url, timeout=5)).status_code == 200
        return False
    port = running.ports[running.container.port(probe["tcpSocket"]["port"])]
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


async def _connected_logins(owner_url: str) -> set[str]:
    conn = await asyncpg.connect(owner_url)
    try:
        rows = await conn.fetch(
            "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return {row["usename"] for row in rows}


async def _stopped_cleanly(running: Running) -> None:
    """SIGTERM was sent: the process ends as a pod's would, without a refused statement."""
    out, _ = await asyncio.wait_for(running.proc.communicate(), timeout=90)
    text = out.decode(errors="replace")
    # uvicorn (the API, the MCP server) shuts down, then re-raises the signal it caught
    clean = {0, -signal.SIGTERM} if running.container.spec["args"][0] in UVICORN else {0}
    assert running.proc.returncode in clean, (
        f"{running.container.workload}: exit {running.proc.returncode}\n{text[-3000:]}"
    )
    assert "permission denied" not in text, f"{running.container.workload}\n{text[-3000:]}"


async def test_every_rendered_deployment_runs_as_its_login_and_answers_its_probes(
    release: Release, tmp_path: Path, volumes: Path
) -> None:
    await _setup(release, tmp_path)
    long_running = [
        c for c in containers(release.manifests) if c.kind in {"Deployment", "StatefulSet"}
    ]
    assert {c.workload.removeprefix("spectral-") for c in long_running} == {
        "relay",
        "rule-candidates",
        "work-executor",
        "clusters-tick",
        "api",
        "mcp",
    }
    started: list[Running] = []
    try:
        for container in long_running:
            started.append(await _start(release, container, volumes))  # noqa: PERF401 - those started stop if a later start fails
        async with httpx.AsyncClient() as client:
            for running in started:
                for kind in ("startupProbe", "readinessProbe", "livenessProbe"):

                    async def answers(r: Running = running, k: str = kind) -> bool:
                        return await _probe(client, r, r.container.spec[k])

                    await eventually(answers, timeout=120, interval=0.5)
        # each deployment is seen connected as its login (some only connect now and then: a
        # tick, a readiness probe)
        expected = {login for name, login in release.logins.items() if name != "maintenance"}
        seen: set[str] = set()

        async def all_seen() -> bool:
            seen.update(await _connected_logins(release.owner_url))
            return expected <= seen

        await eventually(all_seen, timeout=60, interval=0.1)
    finally:
        for running in started:
            if running.proc.returncode is None:
                running.proc.send_signal(signal.SIGTERM)
    for running in started:
        await _stopped_cleanly(running)
    [cronjob] = [c for c in containers(release.manifests) if c.kind == "CronJob"]
    await _run([SPECTRAL, *cronjob.spec["args"]], release.env_of(cronjob))
