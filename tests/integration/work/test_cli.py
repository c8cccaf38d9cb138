"""`spectral work submit`, `spectral threads show|history|list` (run in the test's process)
and `spectral api` (a subprocess) against this test's database."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from spectral.settings import Settings
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    ScriptedSynthesizer,
    backlog,
    executor,
    executor_settings,
    harness,
    run_until_settled,
)
from tests.support import spectral_in_process

pytestmark = pytest.mark.integration


def _spectral(
    env: dict[str, str], *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`spectral ARGS` (its entry point, in this process: :func:`spectral_in_process`)."""
    result = spectral_in_process(env, *args)
    if check and result.returncode != 0:
        raise AssertionError(f"spectral {' '.join(args)} failed: {result.stderr}")
    return result


async def test_submit_show_and_history_from_the_command_line(
    database_url: str, settings: Settings, spectral_env: dict[str, str], tmp_path: Path
) -> None:
    document = tmp_path / "backlog.json"
    document.write_text(json.dumps(backlog("Checkout", "Search")))
    put = _spectral(
        spectral_env,
        "work",
        "put-document",
        str(document),
        "--project",
        PROJECT,
        "--document",
        DOCUMENT,
    )
    assert "created" in put.stdout
    args = ["work", "submit", "--project", PROJECT, "--backlog", DOCUMENT, "--epic", "E1", "--json"]
    first = json.loads(_spectral(spectral_env, *args).stdout)
    second = json.loads(_spectral(spectral_env, *args).stdout)
    assert first["thread_id"] == second["thread_id"]
    assert (first["status"], first["disposition"], second["disposition"]) == (
        "open",
        "created",
        "existing",
    )
    plain = _spectral(
        spectral_env, "work", "submit", "--project", PROJECT, "--backlog", DOCUMENT, "--all"
    )
    parent_id = plain.stdout.split()[0]
    listed = json.loads(
        _spectral(
            spectral_env, "threads", "list", "--project", PROJECT, "--active", "--json"
        ).stdout
    )
    assert len(listed) == 3
    async with (
        harness(database_url) as h,
        executor(executor_settings(settings), database_url, ScriptedSynthesizer()) as handler,
    ):
        await run_until_settled(handler, h.admin)
    shown = json.loads(_spectral(spectral_env, "threads", "show", parent_id, "--json").stdout)
    assert shown["status"] == "complete"
    assert shown["child_summary"]["complete"] == 2
    text = _spectral(spectral_env, "threads", "show", first["thread_id"]).stdout
    assert "status     complete" in text
    history = _spectral(spectral_env, "threads", "history", parent_id)
    assert "ledger consistent" in history.stdout
    assert len(re.findall(r"#\d+ response ", history.stdout)) == 2
    replay = json.loads(_spectral(spectral_env, "threads", "history", parent_id, "--json").stdout)
    assert {i["outcome"] for i in replay["items"]} == {"applied"}
    assert all(i["paid_calls"] == 1 for i in replay["items"])
    put_again = ["work", "put-document", str(document), "--project", PROJECT]
    refused = _spectral(spectral_env, *put_again, "--document", DOCUMENT, check=False)
    assert refused.returncode == 1  # the first version's content: the document is at version 3
    assert "version 3" in refused.stderr
    assert "created" not in refused.stdout
    assert "exists" not in refused.stdout
    missing = _spectral(
        spectral_env, "threads", "show", "00000000-0000-0000-0000-000000000000", check=False
    )
    assert missing.returncode == 1
    assert "no thread" in missing.stderr
    wrong = _spectral(
        spectral_env, "work", "submit", "--project", PROJECT, "--backlog", DOCUMENT, check=False
    )
    assert wrong.returncode == 1


def test_spectral_api_serves_the_openapi_document(spectral_env: dict[str, str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("spectral")), "api", "--port", str(port)],
        env=spectral_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                spec = httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=2).json()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        assert "/commands/story-backlog/generate-epic" in spec["paths"]
        url = f"http://127.0.0.1:{port}/projects/{PROJECT}/threads?active=true"
        anonymous = httpx.get(url)
        assert anonymous.status_code == 401
        assert anonymous.headers["content-type"] == "application/problem+json"
        create = ["tokens", "create", "--name", "cli-test", "--scope", "work:read"]
        token = subprocess.run(
            [str(Path(sys.executable).with_name("spectral")), *create],
            env=spectral_env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        threads = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
        assert threads.json() == {"threads": [], "next_cursor": None}
        # Health answers in front of the app, without a token and outside the OpenAPI document.
        assert "/healthz" not in spec["paths"]
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        while httpx.get(f"http://127.0.0.1:{port}/readyz").status_code != 200:
            assert time.monotonic() < deadline + 30, "the API never became ready"
            time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=15)


async def test_priority_cancel_and_budgets_from_the_command_line(
    database_url: str, settings: Settings, spectral_env: dict[str, str], tmp_path: Path
) -> None:
    document = tmp_path / "backlog.json"
    document.write_text(json.dumps(backlog("Checkout", "Search")))
    _spectral(
        spectral_env,
        "work",
        "put-document",
        str(document),
        "--project",
        PROJECT,
        "--document",
        DOCUMENT,
    )
    submitted = json.loads(
        _spectral(
            spectral_env,
            "work",
            "submit",
            "--project",
            PROJECT,
            "--backlog",
            DOCUMENT,
            "--all",
            "--org",
            "acme",
            "--priority",
            "low",
            "--json",
        ).stdout
    )
    wrong = _spectral(
        spectral_env,
        "work",
        "submit",
        "--project",
        PROJECT,
        "--backlog",
        DOCUMENT,
        "--epic",
        "E1",
        "--priority",
        "urgent",
        check=False,
    )
    assert wrong.returncode == 2
    assert "urgent" in wrong.stderr
    set_budget = json.loads(
        _spectral(
            spectral_env,
            "work",
            "budget",
            "set",
            "acme",
            "--period",
            "day",
            "--tokens",
            "5000",
            "--cost",
            "1.5",
            "--json",
        ).stdout
    )
    assert set_budget["budget"]["token_limit"] == 5000
    assert set_budget["budget"]["cost_limit"] == "1.500000000"
    bad = _spectral(
        spectral_env,
        "work",
        "budget",
        "set",
        "acme",
        "--period",
        "day",
        "--cost",
        "lots",
        check=False,
    )
    assert bad.returncode != 0
    assert "not a number" in bad.stderr
    shown = _spectral(spectral_env, "work", "budget", "show", "acme")
    assert "5,000 tokens" in shown.stdout
    # Nested scopes: a project's, a thread's, a model route's budget, one scope at a time.
    project = json.loads(
        _spectral(
            spectral_env,
            "work",
            "budget",
            "set",
            "--project",
            "p1",
            "--period",
            "week",
            "--tokens",
            "700",
            "--json",
        ).stdout
    )
    assert (project["scope_kind"], project["scope_id"], project["org_id"]) == (
        "project",
        "p1",
        None,
    )
    thread = _spectral(
        spectral_env,
        "work",
        "budget",
        "set",
        "--thread",
        submitted["thread_id"].upper(),
        "--period",
        "total",
        "--cost",
        "2",
    )
    assert f"thread {submitted['thread_id']}: 2.000000000 cost per total" in thread.stdout
    route = _spectral(
        spectral_env, "work", "budget", "show", "--route", "openai/gpt-4o", check=False
    )
    assert route.returncode == 1
    assert "route 'openai/gpt-4o' has no budget" in route.stderr
    two = _spectral(
        spectral_env,
        "work",
        "budget",
        "set",
        "acme",
        "--project",
        "p1",
        "--period",
        "day",
        "--tokens",
        "1",
        check=False,
    )
    assert two.returncode == 2
    assert "name one scope" in two.stderr
    listed = json.loads(_spectral(spectral_env, "work", "budget", "show", "--json").stdout)
    assert [(b["scope_kind"], b["scope_id"]) for b in listed] == [
        ("org", "acme"),
        ("project", "p1"),
        ("thread", submitted["thread_id"]),
    ]
    removed_project = _spectral(spectral_env, "work", "budget", "remove", "--project", "p1")
    assert "project p1: no budget" in removed_project.stdout
    canceled = json.loads(
        _spectral(
            spectral_env,
            "work",
            "cancel",
            submitted["thread_id"],
            "--reason",
            "later",
            "--json",
        ).stdout
    )
    assert (canceled["status"], canceled["disposition"], canceled["canceled_items"]) == (
        "canceled",
        "canceled",
        2,
    )
    again = _spectral(spectral_env, "work", "cancel", submitted["thread_id"])
    assert "already_closed" in again.stdout
    show = _spectral(spectral_env, "threads", "show", submitted["thread_id"])
    assert "cancel     requested" in show.stdout
    assert "later" in show.stdout
    removed = _spectral(spectral_env, "work", "budget", "remove", "acme")
    assert "no budget" in removed.stdout
    missing = _spectral(
        spectral_env, "work", "cancel", "00000000-0000-0000-0000-000000000000", check=False
    )
    assert missing.returncode == 1
    assert "no thread" in missing.stderr
