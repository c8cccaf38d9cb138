"""The Helm chart, rendered the way users render it and read the way Kubernetes reads it.

`helm lint` and `kubeconform -strict` (against Kubernetes' schemas for the oldest and newest
supported versions, and the CRDs of ServiceMonitor, PrometheusRule, ScaledObject and
TriggerAuthentication) for every values file of the chart's ci/ folder; then what no schema
knows: every environment variable is a setting spectral reads (with a value it accepts), secrets
only ever come from Secret objects, every probe asks a port the process serves, every deployment
has a login of its own, KEDA never scales past the partitions, and the PrometheusRule carries
deploy/prometheus's alert rules.
"""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
import typer
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from pydantic_settings import BaseSettings
from ruamel.yaml import YAML

from spectral import cli
from spectral.cli.deployments import factory
from spectral.settings import Settings
from tests.helm.chart import (
    CHART,
    ROOT,
    VALUES_FILES,
    Container,
    containers,
    helm,
    kubeconform,
    of_kind,
    render,
    render_text,
    supported_kubernetes,
)

DEFAULT = CHART / "ci" / "default-values.yaml"
KEDA = CHART / "ci" / "keda-values.yaml"
FULL = CHART / "ci" / "full-values.yaml"
ALERTS = ROOT / "deploy" / "prometheus" / "spectral-alerts.yaml"
LOGINS_SQL = ROOT / "deploy" / "postgres" / "logins.sql"
PLACEHOLDER_URL = "postgresql://login:password@db.invalid:5432/spectral"


def _ids(path: Path) -> str:
    return path.stem


def test_the_values_files_cover_the_chart() -> None:
    assert {p.name for p in VALUES_FILES} >= {
        "default-values.yaml",
        "keda-values.yaml",
        "full-values.yaml",
    }


@pytest.mark.parametrize("values", VALUES_FILES, ids=_ids)
def test_helm_lint_passes(values: Path) -> None:
    done = helm("lint", "--strict", str(CHART), "--values", str(values))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("version", supported_kubernetes())
@pytest.mark.parametrize("values", VALUES_FILES, ids=_ids)
def test_every_manifest_is_valid_for_kubernetes(values: Path, version: str) -> None:
    done = render_text([values])
    assert done.returncode == 0, done.stderr
    checked = kubeconform(done.stdout, version)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    count = len([doc for doc in YAML(typ="safe").load_all(done.stdout) if doc])
    assert f"Valid: {count}, Invalid: 0, Errors: 0, Skipped: 0" in checked.stdout, checked.stdout


def test_kubeconform_refuses_an_unknown_field() -> None:
    """The validation can fail: a field no schema declares is refused, in a core resource and
    in a custom one."""
    done = render_text([KEDA])
    assert done.returncode == 0, done.stderr
    for marker, bogus in (
        ("      containers:\n", "      hostNetwrok: true\n"),
        ("  pollingInterval:", "  maxReplicas: 3\n"),
    ):
        assert marker in done.stdout
        broken = done.stdout.replace(marker, bogus + marker, 1)
        checked = kubeconform(broken, supported_kubernetes()[0])
        assert checked.returncode != 0, bogus


# -- settings ---------------------------------------------------------------------------------


def _parsed(args: list[str]) -> Any:
    """The command ``spectral ARGS`` runs, its options parsed as the CLI parses them (a usage
    error for an unknown command or option, or a value of the wrong type), nothing run."""
    command: Any = typer.main.get_command(cli.app)
    ctx = command.make_context("spectral", list(args))
    while hasattr(command, "resolve_command"):  # a group: its subcommand takes the rest
        pending = [*getattr(ctx, "_protected_args", []), *ctx.args]
        _, command, rest = command.resolve_command(ctx, pending)
        ctx = command.make_context(command.name, list(rest), parent=ctx)
    return command


def _settings_classes() -> list[type[BaseSettings]]:
    """Every settings class the commands the chart runs have loaded (the framework's and any
    feature's): the SPECTRAL_* ones."""
    for args in (["outbox", "relay"], ["clusters", "tick"], ["api"], ["mcp"], ["maintenance"]):
        _parsed(args)
    for name in ("rule-candidates", "work-executor"):
        factory(name)
    found: list[type[BaseSettings]] = []
    todo: list[type[BaseSettings]] = [BaseSettings]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.model_config.get("env_prefix") == "SPECTRAL_":
                found.append(sub)
    assert Settings in found
    return found


def known_settings() -> dict[str, tuple[type[BaseSettings], str]]:
    """Every variable a spectral process reads: SPECTRAL_<FIELD> -> its class and field."""
    return {
        f"SPECTRAL_{name}".upper(): (cls, name)
        for cls in _settings_classes()
        for name in cls.model_fields
    }


def secret_settings() -> set[str]:
    """The variables whose settings are secrets (SecretStr)."""
    return {
        variable
        for variable, (cls, name) in known_settings().items()
        if SecretStr in typing.get_args(cls.model_fields[name].annotation)
        or cls.model_fields[name].annotation is SecretStr
    }


def _spectral_containers(values: Path) -> list[Container]:
    found = [c for c in containers(render([values])) if c.runs_spectral]
    assert found
    return found


@pytest.mark.parametrize("values", VALUES_FILES, ids=_ids)
def test_every_environment_variable_is_a_setting_spectral_accepts(
    values: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = known_settings()
    for container in _spectral_containers(values):
        env = container.env
        unknown = set(env) - set(known)
        assert not unknown, f"{container.workload}/{container.spec['name']}: {unknown}"
        for name in known:
            monkeypatch.delenv(name, raising=False)
        for name, var in env.items():
            # A Secret's value is the user's: a well-formed one stands in for it.
            value = var.get("value", PLACEHOLDER_URL if "URL" in name else "secret")
            monkeypatch.setenv(name, value)
        read = {cls: cls() for cls, _ in known.values()}  # each class accepts its values
        for name, var in env.items():
            cls, field = known[name]
            if "value" in var:
                assert str(getattr(read[cls], field)) not in {"", "None"}, name


@pytest.mark.parametrize(
    ("sets", "transport", "protocol"),
    [
        ({}, "aiokafka", None),  # aiokafka speaks the classic protocol only: nothing to choose
        ({"kafka.transport": "confluent"}, "confluent", "consumer"),
        (
            {"kafka.transport": "confluent", "kafka.groupProtocol": "classic"},
            "confluent",
            "classic",
        ),
    ],
)
def test_every_process_reads_and_writes_kafka_through_the_chosen_transport(
    sets: dict[str, str], transport: str, protocol: str | None
) -> None:
    found = [
        c
        for c in containers(render([DEFAULT], sets))
        if c.runs_spectral and "SPECTRAL_KAFKA_BOOTSTRAP" in c.env  # (migrations: no Kafka)
    ]
    assert len(found) >= 6
    for container in found:
        env = container.env
        assert env["SPECTRAL_KAFKA_TRANSPORT"]["value"] == transport, container.workload
        assert env.get("SPECTRAL_KAFKA_GROUP_PROTOCOL", {}).get("value") == protocol


@pytest.mark.parametrize("values", VALUES_FILES, ids=_ids)
def test_every_container_runs_a_spectral_command_line(values: Path) -> None:
    """Each container's args are a command and options the CLI has (parsed, not run)."""
    for container in _spectral_containers(values):
        args = container.spec["args"]
        try:
            command = _parsed(args)
        except Exception as exc:  # noqa: BLE001 - whatever the CLI refuses, named
            pytest.fail(f"{container.workload}: spectral {' '.join(args)}: {exc!r}")
        assert command.name == args[1 if args[0] in GROUPS else 0]


GROUPS = {"outbox", "clusters", "db", "topics"}


@pytest.mark.parametrize(
    "args",
    [["outbox", "relay", "--metrics-prot", "9100"], ["outbox", "relays"], ["api", "--port", "x"]],
)
def test_a_command_line_the_cli_refuses_is_caught(args: list[str]) -> None:
    with pytest.raises(Exception, match=r"No such|not a valid|Invalid value"):
        _parsed(args)


@pytest.mark.parametrize("values", VALUES_FILES, ids=_ids)
def test_secrets_come_only_from_secret_objects(values: Path) -> None:
    secrets = secret_settings()
    assert {"SPECTRAL_DATABASE_URL", "SPECTRAL_KAFKA_SASL_PASSWORD"} <= secrets
    for container in containers(render([values])):
        for name, var in container.env.items():
            if name in secrets:
                assert "value" not in var, f"{container.workload}: {name} in plain text"
                assert "secretKeyRef" in var["valueFrom"], name


def test_values_hold_no_secret() -> None:
    """No password, key or URL with credentials in the chart's values files."""
    credentials = re.compile(r"://[^/\s:@]+:[^/\s@]+@")
    secret_keys = re.compile(r"(?i)(password|apikey|token)$")

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and value:
                    assert not secret_keys.search(key), f"{path}.{key}"
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for item in node:
                walk(item, path)
        elif isinstance(node, str):
            assert not credentials.search(node), path

    for file in [CHART / "values.yaml", *VALUES_FILES]:
        walk(YAML(typ="safe").load(file.read_text()), file.name)


# -- probes, ports and commands ---------------------------------------------------------------


def _flag(args: list[str], flag: str) -> int | None:
    return int(args[args.index(flag) + 1]) if flag in args else None


@pytest.mark.parametrize("values", VALUES_FILES, ids=_ids)
def test_every_probe_asks_a_port_its_process_serves(values: Path) -> None:
    health_paths = {"/healthz", "/readyz"}
    probed = 0
    for container in _spectral_containers(values):
        args = container.spec["args"]
        served = {
            port
            for port in (_flag(args, "--metrics-port"), _flag(args, "--port"))
            if port is not None
        }
        for declared in container.spec.get("ports", []):
            assert declared["containerPort"] in served, (container.workload, declared)
        probes = [container.spec.get(k) for k in ("startupProbe", "livenessProbe")]
        readiness = container.spec.get("readinessProbe")
        if container.kind in {"CronJob", "Job"}:
            assert probes == [None, None]
            assert readiness is None
            continue
        assert all(probes), container.workload
        assert readiness, container.workload
        for probe in [*probes, readiness]:
            if "httpGet" in probe:
                assert probe["httpGet"]["path"] in health_paths
                assert container.port(probe["httpGet"]["port"]) in served
                # /metrics, /healthz and /readyz listen on all interfaces only when told to
                if container.port(probe["httpGet"]["port"]) == _flag(args, "--metrics-port"):
                    assert container.env["SPECTRAL_METRICS_HOST"]["value"] == "0.0.0.0"  # noqa: S104
            else:
                assert container.port(probe["tcpSocket"]["port"]) in served
            probed += 1
        assert readiness.get("httpGet", {}).get("path", "/readyz") == "/readyz"
    assert probed


def test_each_long_running_deployment_serves_metrics_scraped_as_its_alert_job() -> None:
    manifests = render([FULL])
    services = of_kind(manifests, "Service")
    monitor = next(iter(of_kind(manifests, "ServiceMonitor").values()))
    relabel = monitor["spec"]["endpoints"][0]["relabelings"][0]
    jobs = {
        relabel["replacement"].replace("$1", s["metadata"]["labels"]["app.kubernetes.io/component"])
        for s in services.values()
        if any(p["name"] == "metrics" for p in s["spec"]["ports"])
    }
    expected = set(re.findall(r'job="(spectral-[a-z-]+)"', ALERTS.read_text()))
    assert expected <= jobs, expected - jobs


# -- logins ----------------------------------------------------------------------------------


def _logins_sql_table() -> dict[str, str]:
    """login -> role, as deploy/postgres/logins.sql creates them for compose.yaml."""
    return dict(re.findall(r"\('(spectral_\w+_login)', '(spectral_\w+)'\)", LOGINS_SQL.read_text()))


def _compose_logins() -> dict[str, str]:
    """compose service -> the login its database URL names."""
    compose = YAML(typ="safe").load((ROOT / "compose.yaml").read_text())
    logins = {}
    for name, service in compose["services"].items():
        url = (service.get("environment") or {}).get("SPECTRAL_DATABASE_URL", "")
        if "_login:" in url:
            logins[name] = url.split("://", 1)[1].split(":", 1)[0]
    return logins


def test_every_deployment_runs_as_its_own_login() -> None:
    manifests = render([DEFAULT], {"mcp.enabled": "true"})
    [secret] = of_kind(manifests, "Secret").values()
    keys = {}
    for container in containers(manifests):
        if container.runs_spectral and not container.init and container.kind != "Job":
            ref = container.env["SPECTRAL_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret["metadata"]["name"]
            keys[container.workload.removeprefix("spectral-")] = ref["key"]
    import base64  # noqa: PLC0415

    login_of = {
        key: base64.b64decode(value).decode().split("://", 1)[1].split(":", 1)[0]
        for key, value in secret["data"].items()
        if not key.endswith(".password")
    }
    logins = {name: login_of[key] for name, key in keys.items()}
    # the MCP server is the API's other surface and acts as its login; every other deployment
    # has one of its own
    assert logins.pop("mcp") == logins["api"]
    assert len(set(logins.values())) == len(logins), logins
    table = _logins_sql_table()
    assert {login: table[login] for login in logins.values()} == table
    assert logins == _compose_logins()


def test_the_setup_hook_creates_exactly_those_logins_and_migrates_as_the_owner() -> None:
    manifests = render([DEFAULT])
    [job] = of_kind(manifests, "Job").values()
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    spec = job["spec"]["template"]["spec"]
    steps = [c["name"] for c in spec["initContainers"] + spec["containers"]]
    assert steps == ["migrate", "logins", "topics"]
    script = spec["initContainers"][1]["command"][-1]
    created = dict(re.findall(r"-v login=(\w+) -v role=(\w+)", script))
    assert created == _logins_sql_table()
    owner = spec["initContainers"][0]["env"][0]["valueFrom"]["secretKeyRef"]
    assert owner == {"name": "spectral-db-owner", "key": "url"}


def test_logins_of_your_own_need_no_hook_step() -> None:
    manifests = render([FULL])
    assert not of_kind(manifests, "Secret")
    [job] = of_kind(manifests, "Job").values()
    spec = job["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"] + spec["containers"]] == [
        "migrate",
        "topics",
    ]


# -- KEDA ------------------------------------------------------------------------------------


def _reads(name: str) -> set[str]:
    settings = Settings(database_url=PLACEHOLDER_URL, kafka_bootstrap="k:9092")
    handler = factory(name)(settings, PLACEHOLDER_URL, CollectorRegistry())
    return set(handler.event_types)


async def test_keda_yields_a_scaled_object_per_consumer_on_what_it_reads() -> None:
    manifests = render([KEDA])
    values = YAML(typ="safe").load(KEDA.read_text())
    prefix = values["kafka"]["topicPrefix"]
    partitions = values["kafka"]["topics"]["partitions"]
    scaled = of_kind(manifests, "ScaledObject")
    workloads = of_kind(manifests, "Deployment") | of_kind(manifests, "StatefulSet")
    consumers = {
        name.removeprefix("spectral-"): m
        for name, m in workloads.items()
        if m["spec"]["template"]["spec"]["containers"][0]["args"][0] == "consume"
    }
    assert set(consumers) == {"rule-candidates", "work-executor"}
    for name, workload in consumers.items():
        obj = scaled[f"spectral-{name}"]["spec"]
        assert obj["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": workload["kind"],
            "name": workload["metadata"]["name"],
        }
        assert "replicas" not in workload["spec"]  # KEDA owns the count
        assert 1 <= obj["minReplicaCount"] <= obj["maxReplicaCount"] <= partitions
        topics = set()
        for trigger in obj["triggers"]:
            meta = trigger["metadata"]
            assert trigger["type"] == "kafka"
            assert meta["consumerGroup"] == f"{prefix}{name}"
            assert meta["allowIdleConsumers"] == "false"
            assert meta["sasl"] == "scram_sha512"
            assert meta["tls"] == "enable"
            assert trigger["authenticationRef"]["name"] == "spectral-kafka"
            topics.add(meta["topic"])
        assert topics == {f"{prefix}{t}" for t in _reads(name)}
    assert scaled["spectral-rule-candidates"]["spec"]["maxReplicaCount"] == 4
    [auth] = of_kind(manifests, "TriggerAuthentication").values()
    refs = {r["parameter"]: r["name"] for r in auth["spec"]["secretTargetRef"]}
    assert refs == {"password": "spectral-kafka", "ca": "spectral-kafka-ca"}


def test_keda_never_scales_past_the_partitions() -> None:
    done = render_text([KEDA], {"consumers.work-executor.autoscaling.maxReplicas": "7"})
    assert done.returncode != 0
    assert "exceeds kafka.topics.partitions (6)" in done.stderr


def test_without_keda_there_is_no_scaled_object() -> None:
    assert not of_kind(render([DEFAULT]), "ScaledObject")


# -- the work executor's journal ----------------------------------------------------------------


def test_the_journal_is_on_a_volume_of_each_executor_replica() -> None:
    manifests = render([FULL])
    executor = of_kind(manifests, "StatefulSet")["spectral-work-executor"]
    [claim] = executor["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["spec"]["storageClassName"] == "fast-local"
    assert executor["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    [container] = executor["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert mounts[claim["metadata"]["name"]] == env["SPECTRAL_WORK_JOURNAL_DIR"]
    # in-flight paid calls finish before the pod is killed
    grace = executor["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > float(env["SPECTRAL_LLM_TIMEOUT_SECONDS"] or 0)


# -- security, resources, disruption budgets ----------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=_ids)
def test_every_container_runs_unprivileged_on_a_read_only_root(values: Path) -> None:
    for container in containers(render([values])):
        pod = container.pod["securityContext"]
        assert pod["runAsNonRoot"] is True
        assert pod["runAsUser"] != 0
        ctx = container.spec["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert {"cpu", "memory"} <= set(container.spec["resources"]["requests"])
        assert container.pod["automountServiceAccountToken"] is False
        assert "/tmp" in {m["mountPath"] for m in container.spec["volumeMounts"]}  # noqa: S108


def test_every_long_running_deployment_has_a_disruption_budget() -> None:
    manifests = render([FULL])
    budgets = of_kind(manifests, "PodDisruptionBudget")
    workloads = of_kind(manifests, "Deployment") | of_kind(manifests, "StatefulSet")
    assert set(budgets) == set(workloads)
    for name, budget in budgets.items():
        labels = workloads[name]["spec"]["template"]["metadata"]["labels"]
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


# -- alert rules ------------------------------------------------------------------------------


def _rules(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    [rule] = of_kind(manifests, "PrometheusRule").values()
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def test_the_prometheus_rule_carries_the_alert_rules_file() -> None:
    """Generated from deploy/prometheus/spectral-alerts.yaml at render time: equal to it."""
    expected = YAML(typ="safe").load(ALERTS.read_text())["groups"]
    assert _rules(render([FULL])) == expected


def test_with_maintenance_as_a_cronjob_its_two_scrape_alerts_watch_the_cronjob() -> None:
    expected = YAML(typ="safe").load(ALERTS.read_text())["groups"]
    got = _rules(render([DEFAULT], {"metrics.prometheusRule.enabled": "true"}))
    changed = {"SpectralMaintenanceAbsent", "SpectralMaintenanceFailing"}
    for want_group, got_group in zip(expected, got, strict=True):
        assert want_group["name"] == got_group["name"]
        for want, rule in zip(want_group["rules"], got_group["rules"], strict=True):
            if rule.get("alert") in changed:
                assert "kube_cronjob_" in rule["expr"]
                assert 'cronjob="spectral-maintenance", namespace="spectral"' in rule["expr"]
                assert (rule["for"], rule["labels"]) == (want["for"], want["labels"])
                assert rule["annotations"]["runbook"]
            else:
                assert rule == want


# -- the image and version --------------------------------------------------------------------


def test_the_image_is_this_version_of_the_dockerfile_image() -> None:
    chart = YAML(typ="safe").load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]
    images = {c.spec["image"] for c in containers(render([DEFAULT])) if c.runs_spectral}
    assert images == {f"spectral:{project['version']}"}


# -- values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "complaint"),
    [
        ("relay.replica", "2", "'replica' not allowed"),  # a typo is refused, never ignored
        ("env.LOG_LEVEL", "DEBUG", "does not match pattern"),  # settings are SPECTRAL_*
        ("maintenance.mode", "daemonset", "maintenance/mode"),
        ("kafka.securityProtocol", "TLS", "kafka/securityProtocol"),
        ("kafka.transport", "kafka-python", "kafka/transport"),
        ("kafka.groupProtocol", "eager", "kafka/groupProtocol"),
    ],
)
def test_values_the_chart_does_not_know_are_refused(key: str, value: str, complaint: str) -> None:
    done = render_text([DEFAULT], {key: value})
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
    assert complaint in done.stderr, done.stderr


def test_the_packaged_chart_renders_as_the_source_does(tmp_path: Path) -> None:
    """`helm package` carries the files the chart links to (the alert rules), so a chart
    installed from its package renders what the checkout renders."""
    done = helm("package", str(CHART), "--destination", str(tmp_path))
    assert done.returncode == 0, done.stderr
    [package] = tmp_path.glob("spectral-*.tgz")
    args = ["template", "spectral", "--namespace", "spectral", "--values", str(FULL)]
    from_package = helm(*args[:2], str(package), *args[2:])
    from_source = render_text([FULL])
    assert from_package.returncode == 0, from_package.stderr
    # the logins' passwords are made anew at each render; FULL brings its own logins
    assert from_package.stdout == from_source.stdout
