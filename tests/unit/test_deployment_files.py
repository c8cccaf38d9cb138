"""compose.yaml, the image and the monitoring files, checked the way a deployment depends on them.

The Compose file is validated against the Compose specification (the schema check-jsonschema
vendors: no network needed), then for what the schema cannot know: Kafka reachable from the
host, deployments that wait for the migrations and topics, a snapshot producer, health checks
on /readyz, metrics bound for scraping. The alert rules' unit tests run with promtool."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from ruamel.yaml import YAML

from consumers.rule_candidates.metrics import RuleCandidateMetrics
from consumers.work_executor.metrics import ExecutorMetrics
from producers.clusters.metrics import ClusterMetrics
from spectral.engine.metrics import ConsumerMetrics
from spectral.maintenance.metrics import MaintenanceMetrics
from spectral.maintenance.retention import Pruned
from spectral.observability.health import Health
from spectral.observability.http import HttpMetrics
from spectral.observability.progress import ProgressMetrics
from spectral.outbox.relay.metrics import RelayMetrics

ROOT = Path(__file__).resolve().parents[2]
LONG_RUNNING = ("relay", "rule-candidates", "work-executor", "clusters-tick", "api", "maintenance")


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = YAML(typ="safe").load((ROOT / "compose.yaml").read_text())
    return loaded


def test_compose_follows_the_compose_specification() -> None:
    checker = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(ROOT / "compose.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_kafka_is_advertised_to_the_host_too() -> None:
    kafka = _compose()["services"]["kafka"]
    env = kafka["environment"]
    advertised = dict(item.split("://", 1) for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    host_port = advertised["HOST"].rsplit(":", 1)[1]
    assert any(port.endswith(f":{host_port}:{host_port}") for port in kafka["ports"])
    assert advertised["PLAINTEXT"] == "kafka:9092"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_deployments_wait_for_setup_and_report_health() -> None:
    services = _compose()["services"]
    assert services["topics"]["command"][-2:] == ["topics", "apply"]
    assert "--every" in services["clusters-tick"]["command"]
    for name in LONG_RUNNING:
        service = services[name]
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert service["depends_on"]["topics"]["condition"] == "service_completed_successfully"
        assert "/readyz" in " ".join(service["healthcheck"]["test"])
        assert service["environment"]["SPECTRAL_METRICS_HOST"] == "0.0.0.0"  # noqa: S104
        assert "--metrics-port" in service["command"]


def test_the_image_installs_the_wheel_and_ignores_local_state() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install -e" not in dockerfile
    assert "pip wheel" in dockerfile
    assert "/wheels/*.whl" in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignored  # everything not named is left out: .spectral, .venv, .git


def _exported_series() -> set[str]:
    registry = CollectorRegistry()
    RuleCandidateMetrics(registry)
    ExecutorMetrics(registry)
    RelayMetrics(registry)
    ClusterMetrics(registry)
    maintenance = MaintenanceMetrics(registry)
    maintenance.table("core.outbox", 0, 0)
    maintenance.retention(Pruned("core.api_tokens", 1, 60.0), dry_run=False)
    consumer = ConsumerMetrics(registry, "c")
    consumer.retried("database")
    consumer.dead_lettered("not_json")
    progress = ProgressMetrics(registry, "c")
    from aiokafka import TopicPartition  # noqa: PLC0415

    progress.set(TopicPartition("t", 0), 1, 0.0, stalled=False)
    HttpMetrics(registry, "api").observe("/r", "GET", 401, 0.1)
    health = Health()
    health.set_check("database", ok=True)
    metrics = [*registry.collect(), *health.collector().collect()]
    names = {sample.name for metric in metrics for sample in metric.samples}
    histograms = {n.rsplit("_", 1)[0] for n in names if n.endswith(("_bucket", "_count"))}
    return names | histograms | {"up"}


def test_rules_and_dashboard_name_only_exported_series() -> None:
    exported = _exported_series()
    series = re.compile(r"\b((?:spectral|synthesis|work)_[a-z0-9_]+)")
    rules = (ROOT / "deploy/prometheus/spectral-alerts.yaml").read_text()
    referenced = set(series.findall(rules)) - {"spectral_alerts"}
    assert referenced <= exported, referenced - exported
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/spectral.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for e in exprs for name in series.findall(e)}
    assert used <= exported, used - exported


def test_every_alert_has_a_runbook_line() -> None:
    rules = YAML(typ="safe").load((ROOT / "deploy/prometheus/spectral-alerts.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            annotations = rule["annotations"]
            assert annotations.get("runbook"), f"{rule['alert']} says nothing to do"


def test_every_alert_has_a_promtool_case_that_fires_it() -> None:
    """An alert no test has seen fire may never fire: each rule is expected, with its labels, by
    at least one case of the rules' unit tests."""
    yaml = YAML(typ="safe")
    rules = yaml.load((ROOT / "deploy/prometheus/spectral-alerts.yaml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    cases = yaml.load((ROOT / "deploy/prometheus/tests/spectral-alerts.test.yaml").read_text())
    fired = {
        check["alertname"]
        for case in cases["tests"]
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    assert alerts <= fired, sorted(alerts - fired)


def test_the_alert_rules_pass_their_promtool_unit_tests() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool missing: `make test` installs Debian's prometheus package")
    result = subprocess.run(
        [promtool, "test", "rules", "spectral-alerts.test.yaml"],
        cwd=ROOT / "deploy/prometheus/tests",
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_executors_journal_outlives_its_container() -> None:
    """Paid answers wait in the response journal until the ledger has them: the executor keeps
    it on a named volume, where the image's user may write (the Dockerfile owns it)."""
    compose = _compose()
    executor = compose["services"]["work-executor"]
    journal = executor["environment"]["SPECTRAL_WORK_JOURNAL_DIR"]
    volume, _, target = next(v for v in executor["volumes"] if v.endswith(journal)).partition(":")
    assert target == journal
    assert volume in compose["volumes"]  # named, not the container's own layer
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"mkdir -p {journal}" in dockerfile
    assert "chown -R nobody:nogroup /var/lib/spectral" in dockerfile


def test_the_first_token_has_a_documented_way() -> None:
    """The API's login may not make tokens; the owner's may: compose has a one-off service that
    acts as the owner, and its header says how to make the first token with it."""
    compose = _compose()
    admin = compose["services"]["admin"]
    assert admin["profiles"] == ["admin"]  # not started by `up`
    assert admin["environment"]["SPECTRAL_DATABASE_URL"].startswith("postgresql://spectral:")
    header = (ROOT / "compose.yaml").read_text().split("x-spectral-environment")[0]
    assert "docker compose run --rm admin spectral tokens create" in header


def test_images_are_named_once() -> None:
    text = (ROOT / "compose.yaml").read_text()
    assert text.count("spectral:local") == 1
    assert text.count("postgres:15") == 1


def test_alerts_reach_alertmanager_and_every_severity_has_a_route() -> None:
    services = _compose()["services"]
    assert "alertmanager" in services
    assert "./deploy/alertmanager/alertmanager.yml" in " ".join(services["alertmanager"]["volumes"])
    prometheus = YAML(typ="safe").load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = [
        target
        for manager in prometheus["alerting"]["alertmanagers"]
        for config in manager["static_configs"]
        for target in config["targets"]
    ]
    assert targets == ["alertmanager:9093"]
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.fail("amtool missing: `make test` installs Debian's prometheus-alertmanager package")
    config = ROOT / "deploy/alertmanager/alertmanager.yml"
    checked = subprocess.run(
        [amtool, "check-config", str(config)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = YAML(typ="safe").load((ROOT / "deploy/prometheus/spectral-alerts.yaml").read_text())
    alerts = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}
    severities = {rule["labels"]["severity"] for rule in alerts.values()}
    routes = YAML(typ="safe").load(config.read_text())["route"]["routes"]
    routed = {m.split('"')[1] for route in routes for m in route["matchers"]}
    assert severities <= routed, severities - routed
    inhibits = YAML(typ="safe").load(config.read_text())["inhibit_rules"]
    named = set(re.findall(r"Spectral[A-Za-z]+", json.dumps(inhibits)))
    assert named
    assert named <= set(alerts), named - set(alerts)
