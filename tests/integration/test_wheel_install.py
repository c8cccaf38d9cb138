"""The wheel as a user installs it: built from this checkout, installed (not editable) into a
fresh virtual environment, run from a directory outside the repository. Its only top-level
import packages are spectral's (contracts/, producers/ and consumers/ ship inside the spectral
namespace); it loads every part of every built-in plugin, finds its migrations and event schemas,
migrates an empty database, creates its topics and runs the demo (which consumes both streams);
a plugin installed beside it adds its command, its migrations and its contract.

The fresh environment sees, besides the wheel, exactly the distributions the wheel requires
(its Requires-Dist, transitively, with their extras), linked from this checkout's environment
rather than downloaded again: an import of anything the wheel does not declare fails as it would
for a user, and `pip check` holds the versions to the wheel's ranges."""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import asyncpg
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import unique_name, with_database

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

TOP_LEVEL = """
import importlib.metadata as m
print(" ".join(sorted({f.parts[0] for f in m.files("spectral") if f.suffix == ".py"})))
"""

LOAD_EVERY_PLUGIN = """
from spectral.plugins import installed_plugins, installed_registry, settings_classes
from spectral.cli import commands, load_command
loaded = []
for plugin in installed_plugins():
    d = plugin.declaration
    refs = [*d.events, *(x.factory for x in d.deployments), *(x.factory for x in d.routers),
            *(x.factory for x in d.pages), *(x.register for x in d.tools)]
    for ref in refs:
        plugin.load(ref, "part")
    for command in d.commands:
        load_command(command.name)
    loaded.append(f"{plugin.name}={plugin.package}")
settings_classes()
installed_registry()
print(" ".join(loaded))
"""


NATIVE_IN_THE_SPEC = """
from spectral.contracts.failure_cluster import FAILURE_CLUSTER_SPEC
print(type(FAILURE_CLUSTER_SPEC.read_view).__name__)
"""


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def _commands(usage: str) -> set[str]:
    """The command names of ``spectral --help`` (the first word of each row of its table)."""
    return {line.split()[1] for line in usage.splitlines() if line.startswith("│ ")}


def _pip(*args: str, python: Path | None = None, **kwargs: object) -> None:
    """This environment's pip (``python``: acting on another environment's interpreter)."""
    target = ("--python", str(python)) if python is not None else ()
    done = _run([sys.executable, "-m", "pip", *target, *args], **kwargs)
    assert done.returncode == 0, done.stdout + done.stderr


def _wheel(source: Path, dist: Path) -> Path:
    """The wheel of the project in ``source``, built with this environment's setuptools (and
    cargo's target folder of the checkout: the Rust dependencies are not compiled again)."""
    env = {**os.environ, "CARGO_TARGET_DIR": str(ROOT / "native" / "target")}
    _pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source), env=env)
    [wheel] = dist.glob("*.whl")
    return wheel


def _requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(archive.read(name))
    return [Requirement(line) for line in meta.get_all("Requires-Dist") or []]


def _closure(requirements: list[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions ``requirements`` need, transitively, with their extras
    (requirements of extras nobody asked for, the wheel's ``dev`` among them, left out)."""
    found: dict[str, tuple[metadata.Distribution, set[str]]] = {}
    todo = [(r, frozenset[str]()) for r in requirements]
    while todo:
        requirement, extras = todo.pop()
        if requirement.marker and not any(
            requirement.marker.evaluate({"extra": e}) for e in {"", *extras}
        ):
            continue
        name = canonicalize_name(requirement.name)
        dist, asked = found.get(name) or (metadata.distribution(name), set())
        if name in found and requirement.extras <= asked:
            continue
        asked |= requirement.extras
        found[name] = (dist, asked)
        todo.extend((Requirement(line), frozenset(asked)) for line in dist.requires or [])
    return [dist for dist, _ in found.values()]


def _link_requirements(wheel: Path, venv: Path) -> None:
    """Link what the wheel requires from this environment into ``venv``'s site-packages."""
    [site] = venv.glob("lib/python*/site-packages")
    for dist in _closure(_requirements(wheel)):
        origin = Path(str(dist.locate_file("")))
        tops = {f.parts[0] for f in dist.files or [] if f.parts[0] not in {"..", "__pycache__"}}
        for top in tops:
            if (origin / top).exists() and not (site / top).exists():
                (site / top).symlink_to(origin / top)


def _installed(tmp_path: Path) -> tuple[Path, Path]:
    """The wheel built from this checkout and installed into a fresh virtual environment; and
    a directory outside the checkout to run it from."""
    dist, venv, outside = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    outside.mkdir()
    # Built from the tracked files only, in a copy: neither a stale build/ directory of the
    # checkout nor an untracked file can slip into the wheel (a fresh clone has neither).
    source = tmp_path / "source"
    tracked = _run(["git", "ls-files", "-z"], cwd=ROOT)
    assert tracked.returncode == 0, tracked.stderr
    for name in filter(None, tracked.stdout.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheel = _wheel(source, dist)
    assert wheel.name.startswith("spectral-")
    native = [
        n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("spectral/contracts/_wire")
    ]
    assert native, "the wheel lacks the Rust fast path (spectral/contracts/_wire*.so)"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    _link_requirements(wheel, venv)
    _pip("install", "-q", "--no-deps", str(wheel), python=venv / "bin/python", cwd=outside)
    _pip("check", python=venv / "bin/python", cwd=outside)
    return venv, outside


@pytest.mark.timeout(900)  # a wheel build, a fresh environment and the demo, on a busy machine
async def test_the_wheel_migrates_and_runs_the_demo_from_outside_the_checkout(
    tmp_path: Path, stack: object
) -> None:
    from spectral.devstack import Endpoints  # noqa: PLC0415

    assert isinstance(stack, Endpoints)
    venv, outside = _installed(tmp_path)
    spectral = str(venv / "bin/spectral")

    name = unique_name("spectral_wheel_")
    admin = await asyncpg.connect(with_database(stack.database_url, "postgres"))
    await admin.execute(f'CREATE DATABASE "{name}"')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECTRAL_", "PYTHON"))}
    env.update(
        SPECTRAL_KAFKA_BOOTSTRAP=stack.kafka_bootstrap,
        SPECTRAL_DATABASE_URL=with_database(stack.database_url, name),
        SPECTRAL_TOPIC_PREFIX=unique_name("w") + ".",
        SPECTRAL_STATE_DIR=str(tmp_path / "state"),
    )
    try:
        where = _run(
            [str(venv / "bin/python"), "-c", "import spectral; print(spectral.__file__)"],
            cwd=outside,
            env=env,
        )
        assert where.stdout.startswith(str(venv)), where.stdout  # the wheel, not the checkout
        native = _run([str(venv / "bin/python"), "-c", NATIVE_IN_THE_SPEC], cwd=outside, env=env)
        assert native.stdout.strip() == "Checker", native.stdout + native.stderr
        top = _run([str(venv / "bin/python"), "-c", TOP_LEVEL], cwd=outside, env=env)
        assert top.stdout.split() == ["spectral", "spectral_schemas"], top.stdout + top.stderr
        plugins = _run([str(venv / "bin/python"), "-c", LOAD_EVERY_PLUGIN], cwd=outside, env=env)
        assert plugins.returncode == 0, plugins.stderr
        assert sorted(plugins.stdout.split()) == [
            "clusters=spectral.producers.clusters",
            "triage=spectral.consumers.rule_candidates",
            "work-executor=spectral.consumers.work_executor",
            "work=spectral.producers.work",
        ]

        usage = _run([spectral, "--help"], cwd=outside, env=env)
        assert usage.returncode == 0, usage.stderr
        assert {"consume", "replay", "triage", "work", "clusters"} <= _commands(usage.stdout)
        asyncapi = _run([spectral, "contracts", "asyncapi"], cwd=outside, env=env)
        assert asyncapi.returncode == 0, asyncapi.stderr
        assert "platform_failure_cluster_detected" in json.loads(asyncapi.stdout)["channels"]

        migrate = _run([spectral, "db", "migrate"], cwd=outside, env=env)
        assert migrate.returncode == 0, migrate.stderr
        assert "0001_core" in migrate.stdout
        assert " 0 applied" not in f" {migrate.stdout.splitlines()[-1]}"

        check = _run([spectral, "contracts", "export", "--check"], cwd=outside, env=env)
        assert check.returncode == 0, check.stderr
        site = venv / "lib"
        before = sorted(p.name for p in site.rglob("*.json"))
        export = _run([spectral, "contracts", "export"], cwd=outside, env=env)
        assert export.returncode == 2, export.stdout + export.stderr
        assert "--dir" in export.stderr
        assert sorted(p.name for p in site.rglob("*.json")) == before

        topics = _run([spectral, "topics", "apply"], cwd=outside, env=env)
        assert topics.returncode == 0, topics.stderr
        demo = _run([spectral, "demo"], cwd=outside, env=env, timeout=400)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "ledger consistent" in demo.stdout
        assert "ERROR" not in demo.stdout + demo.stderr

        _a_plugin_installed_beside_it(venv, outside, env, tmp_path)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def _a_plugin_installed_beside_it(
    venv: Path, outside: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The example plugin installed into the wheel's environment: its command, its migrations
    and its contract, run by the installed ``spectral``."""
    spectral = str(venv / "bin/spectral")
    example = tmp_path / "deploy-tracker"  # built in a copy: the build writes beside it
    shutil.copytree(ROOT / "examples" / "deploy-tracker", example)
    wheel = _wheel(example, tmp_path / "plugin-dist")
    _pip("install", "-q", "--no-deps", str(wheel), python=venv / "bin/python")
    usage = _run([spectral, "--help"], cwd=outside, env=env)
    assert "deploys" in _commands(usage.stdout), usage.stdout + usage.stderr
    migrate = _run([spectral, "db", "migrate"], cwd=outside, env=env)
    assert "applied deploy-tracker/0001_deploys" in migrate.stdout, migrate.stderr
    outcomes = _run([spectral, "deploys", "outcomes", "--json"], cwd=outside, env=env)
    assert outcomes.returncode == 0, outcomes.stderr
    assert json.loads(outcomes.stdout) == []
    asyncapi = _run(
        [spectral, "contracts", "asyncapi", "--plugin", "deploy-tracker"], cwd=outside, env=env
    )
    assert asyncapi.returncode == 0, asyncapi.stderr
    assert "deploys_deploy_finished" in json.loads(asyncapi.stdout)["channels"]
