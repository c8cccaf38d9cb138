"""The HTTP API's OpenAPI document as strict tools read it: two independent validators
(openapi-spec-validator, and Redocly's CLI with its recommended rules, no warning allowed) and
a client generated from it (openapi-python-client) that drives a triage and a work flow against
the real API on a real socket."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from consumers.rule_candidates.plugin import TRIAGE_WRITE
from producers.work.plugin import WORK_SUBMIT
from spectral.cli.api import compose_app, deployment_topics
from spectral.devstack import Endpoints
from spectral.settings import Settings
from tests.integration.api.support import mint, seed_clusters, served
from tests.integration.work.support import DOCUMENT, PROJECT, backlog

pytestmark = pytest.mark.integration

TOOLING = Path(__file__).parents[2] / "openapi"
REDOCLY = TOOLING / "node_modules" / ".bin" / "redocly"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")


@pytest.fixture
async def document(settings: Settings, database_url: str, kafka_bootstrap: str) -> dict[str, Any]:
    """/openapi.json as the composed app serves it."""
    app = compose_app(
        settings,
        Endpoints(kafka_bootstrap, database_url),
        await deployment_topics(settings, database_url),
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as http:
        response = await http.get("/openapi.json")
    assert response.status_code == 200
    found: dict[str, Any] = response.json()
    return found


def test_openapi_spec_validator_accepts_it(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_openapi_spec_validator_does_refuse_a_header_without_a_schema(
    document: dict[str, Any],
) -> None:
    """The defect it once had: a Header Object with neither schema nor content."""
    broken = json.loads(json.dumps(document))
    responses = broken["paths"]["/clusters/{cluster_id}"]["get"]["responses"]
    responses["200"]["headers"]["ETag"].pop("schema")
    with pytest.raises(Exception, match=r"oneOf"):
        validate(broken)


def redocly(path: Path) -> subprocess.CompletedProcess[str]:
    assert shutil.which("node"), "node is needed (apt-get install -y nodejs npm)"
    assert REDOCLY.exists(), "Redocly's CLI is not installed: run `make tooling`"
    return subprocess.run(
        [
            str(REDOCLY),
            "lint",
            str(path),
            "--config",
            str(TOOLING / "redocly.yaml"),
            "--format=json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=TOOLING,
        env={
            **os.environ,
            "REDOCLY_TELEMETRY": "off",
            "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true",
            "NO_COLOR": "1",
        },
    )


def problems_of(run: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    start = run.stdout.find("{")
    assert start >= 0, run.stdout + run.stderr
    report: dict[str, Any] = json.loads(run.stdout[start:])
    found: list[dict[str, Any]] = report["problems"]
    return found


def test_redocly_finds_no_error_or_warning(document: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "openapi.json"
    path.write_text(json.dumps(document))
    run = redocly(path)
    problems = problems_of(run)
    assert problems == [], json.dumps(problems, indent=1)[:4000]
    assert run.returncode == 0, run.stderr


def test_redocly_does_refuse_a_broken_document(document: dict[str, Any], tmp_path: Path) -> None:
    broken = json.loads(json.dumps(document))
    broken.pop("servers")
    broken["paths"]["/clusters"]["get"]["responses"] = {}
    path = tmp_path / "openapi.json"
    path.write_text(json.dumps(broken))
    run = redocly(path)
    rules = {problem["ruleId"] for problem in problems_of(run)}
    assert {"no-empty-servers", "struct"} & rules, rules
    assert run.returncode != 0


@pytest.fixture
def generated_client(document: dict[str, Any], tmp_path: Path) -> Iterator[Any]:
    """A Python client generated from the document (no post-hooks: what the generator writes)."""
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(document))
    config = tmp_path / "config.yaml"
    config.write_text("package_name_override: spectral_api_client\npost_hooks: []\n")
    package = tmp_path / "src" / "spectral_api_client"
    run = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(spec),
            "--config",
            str(config),
            "--meta",
            "none",
            "--output-path",
            str(package),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "warning" not in (run.stdout + run.stderr).lower(), run.stdout + run.stderr
    sys.path.insert(0, str(package.parent))
    try:
        yield importlib.import_module("spectral_api_client")
    finally:
        sys.path.remove(str(package.parent))
        for name in [m for m in sys.modules if m.startswith("spectral_api_client")]:
            del sys.modules[name]


async def test_a_generated_client_triages_a_cluster_and_submits_work(
    settings: Settings, database_url: str, kafka_bootstrap: str, generated_client: Any
) -> None:
    (cluster,) = await seed_clusters(database_url, 1)
    token = await mint(database_url, "generated", TRIAGE_WRITE, WORK_SUBMIT)
    app = compose_app(
        settings,
        Endpoints(kafka_bootstrap, database_url),
        await deployment_topics(settings, database_url),
    )
    c = generated_client
    api = importlib.import_module("spectral_api_client.api")
    models = importlib.import_module("spectral_api_client.models")
    triage = {
        name: importlib.import_module(f"{api.__name__}.triage.{name}")
        for name in ("list_failure_clusters", "get_cluster_detail", "triage_cluster")
    }
    commands = importlib.import_module(f"{api.__name__}.commands.generate_epic")
    documents = importlib.import_module(f"{api.__name__}.documents.put_document")
    observation = importlib.import_module(f"{api.__name__}.observation.get_thread")
    with served(app) as port:
        client = c.AuthenticatedClient(base_url=f"http://127.0.0.1:{port}", token=token)
        # The inbox, one cluster, and a triage with the ETag it read.
        page = triage["list_failure_clusters"].sync(client=client)
        assert isinstance(page, models.ClusterPage)
        assert [str(s.cluster_id) for s in page.clusters] == [str(cluster)]
        read = triage["get_cluster_detail"].sync_detailed(cluster, client=client)
        assert read.status_code == 200
        etag = read.headers["etag"]
        changed = triage["triage_cluster"].sync_detailed(
            cluster,
            client=client,
            body=models.TriageIn(status=models.Status.IN_REVIEW, notes="from a generated client"),
            if_match=etag,
        )
        assert changed.status_code == 200, changed.content
        assert isinstance(changed.parsed, models.ClusterDetail)
        assert changed.parsed.status == models.Status.IN_REVIEW
        assert changed.parsed.audit[-1].actor == "token:generated"
        stale = triage["triage_cluster"].sync_detailed(
            cluster, client=client, body=models.TriageIn(notes="again"), if_match=etag
        )
        assert stale.status_code == 412
        assert isinstance(stale.parsed, models.Problem)
        assert stale.parsed.type_ == "/problems/stale-version"
        # A document, a command, and the thread it opened.
        put = documents.sync_detailed(
            PROJECT,
            DOCUMENT,
            client=client,
            body=models.StoryBacklog.from_dict(backlog("Checkout")),
        )
        assert put.status_code == 201, put.content
        enqueued = commands.sync_detailed(
            client=client,
            body=models.GenerateEpicRequest(
                project_id=PROJECT, story_backlog_id=DOCUMENT, epic_id="E1"
            ),
        )
        assert enqueued.status_code == 202, enqueued.content
        assert isinstance(enqueued.parsed, models.CommandResponse)
        thread_id = enqueued.parsed.thread_id
        assert enqueued.headers["location"] == f"/threads/{thread_id}"
        thread = observation.sync(thread_id, client=client)
        assert isinstance(thread, models.ThreadOut)
        assert str(thread.thread_id) == str(thread_id)
        assert thread.requested_by == "token:generated"
