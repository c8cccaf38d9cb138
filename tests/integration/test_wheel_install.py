"""The wheel as a user installs it: built from this checkout, installed (not editable) into a
fresh virtual environment, run from a directory outside the repository. It must find its
migrations and event schemas, migrate an empty database, create its topics and run the demo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tests.support import unique_name, with_database

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.mark.timeout(600)
async def test_the_wheel_migrates_and_runs_the_demo_from_outside_the_checkout(
    tmp_path: Path, stack: object
) -> None:
    from spectral.devstack import Endpoints  # noqa: PLC0415

    assert isinstance(stack, Endpoints)
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
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    wheels = list(dist.glob("spectral-*.whl"))
    assert len(wheels) == 1
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    installed = _run([str(venv / "bin/pip"), "install", "-q", str(wheels[0])], cwd=outside)
    assert installed.returncode == 0, installed.stderr
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
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
