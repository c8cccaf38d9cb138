"""The Helm chart (deploy/helm/spectral) rendered and validated with the tools the Makefile builds
(``make helm-tools``: helm and kubeconform from the Go module proxy, the schemas from registries,
all in the ignored build/helm folder)."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from ruamel.yaml import YAML

from tests.helm.schemas import KUBERNETES_VERSIONS

ROOT: Final = Path(__file__).resolve().parents[2]
CHART: Final = ROOT / "deploy" / "helm" / "spectral"
VALUES_FILES: Final = tuple(sorted((CHART / "ci").glob("*-values.yaml")))
TOOLS: Final = ROOT / "build" / "helm"
SCHEMAS: Final = TOOLS / "schemas"
WORKLOAD_KINDS: Final = ("Deployment", "StatefulSet", "CronJob", "Job")
SPECTRAL_CONTAINER: Final = "spectral"


def tool(name: str) -> Path:
    path = TOOLS / "bin" / name
    if not path.exists():
        pytest.fail(f"{path} missing: `make helm-tools` builds it (make test does)", pytrace=False)
    return path


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool("helm")), *args], capture_output=True, text=True, timeout=120, check=False
    )


def render_text(
    values_files: Sequence[Path] = (), sets: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with these values files, then ``--set`` these values."""
    return _render(tuple(values_files), tuple(sorted((sets or {}).items())))


@functools.cache
def _render(
    values_files: tuple[Path, ...], sets: tuple[tuple[str, str], ...]
) -> subprocess.CompletedProcess[str]:
    args = ["template", "spectral", str(CHART), "--namespace", "spectral"]
    for file in values_files:
        args += ["--values", str(file)]
    for key, value in sets:
        args += ["--set", f"{key}={value}"]
    return helm(*args)


def render(
    values_files: Sequence[Path] = (), sets: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The manifests ``helm template`` renders, one dict each (empty documents dropped)."""
    done = render_text(values_files, sets)
    assert done.returncode == 0, done.stderr
    return [doc for doc in YAML(typ="safe").load_all(done.stdout) if doc]


def kubeconform(manifests: str, kubernetes_version: str) -> subprocess.CompletedProcess[str]:
    """kubeconform -strict with the schemas of ``make helm-tools`` only (nothing downloaded)."""
    kubernetes = SCHEMAS / "kubernetes" / "{{ .NormalizedKubernetesVersion }}"
    crds = SCHEMAS / "crds"
    suffix = "{{ .ResourceKind }}{{ .KindSuffix }}.json"
    return subprocess.run(
        [
            str(tool("kubeconform")),
            "-strict",
            "-summary",
            "-kubernetes-version",
            kubernetes_version,
            "-schema-location",
            f"{kubernetes}/{suffix}",
            "-schema-location",
            f"{crds}/{suffix}",
            "-",
        ],
        input=manifests,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def supported_kubernetes() -> tuple[str, ...]:
    return KUBERNETES_VERSIONS


def of_kind(manifests: Sequence[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest["spec"]
    if manifest["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    result: dict[str, Any] = spec["template"]["spec"]
    return result


@dataclass(frozen=True)
class Container:
    """One container of a workload, with where it came from."""

    workload: str
    kind: str
    spec: dict[str, Any]
    pod: dict[str, Any]
    init: bool

    @property
    def runs_spectral(self) -> bool:
        return bool(self.spec["image"].startswith("spectral:"))

    @property
    def env(self) -> dict[str, dict[str, Any]]:
        return {var["name"]: var for var in self.spec.get("env", [])}

    def port(self, name_or_number: str | int) -> int:
        if isinstance(name_or_number, int):
            return name_or_number
        ports = {p["name"]: int(p["containerPort"]) for p in self.spec.get("ports", [])}
        assert name_or_number in ports, f"{self.workload}: no port named {name_or_number}"
        return ports[name_or_number]


def containers(manifests: Sequence[dict[str, Any]]) -> Iterator[Container]:
    for manifest in manifests:
        if manifest["kind"] not in WORKLOAD_KINDS:
            continue
        pod = pod_spec(manifest)
        name = manifest["metadata"]["name"]
        for init in (True, False):
            for spec in pod.get("initContainers" if init else "containers", []):
                yield Container(name, manifest["kind"], spec, pod, init)
