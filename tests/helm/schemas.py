"""The JSON Schemas kubeconform validates the chart against, laid out for its schema locations.

Run by the Makefile (``helm-tools``) before pytest, from what registries serve:

* Kubernetes' own resources: the strict schemas the ``kubernetes-validate`` wheel (PyPI) ships,
  read from the wheel as data (it is not installed), pinned by its sha256. Each names itself by
  an https ``$id`` and refers to one ``_definitions.json`` by a path under it, which kubeconform
  would fetch; the copy here has no ``$id`` and refers to the file beside it, so kubeconform's
  file loader finds it and nothing is downloaded.
* ServiceMonitor, PrometheusRule, ScaledObject and TriggerAuthentication: the
  CustomResourceDefinitions in the prometheus-operator and KEDA Go modules (``go mod download``,
  checked against Go's checksum database), turned into strict JSON Schemas the way kubeconform's
  own ``openapi2jsonschema`` script does: every object that lists its properties refuses others
  (unless it keeps unknown fields), ``int-or-string`` becomes a choice of the two.

Layout (kubeconform's templates ``{{ .ResourceKind }}{{ .KindSuffix }}.json``)::

    OUT/kubernetes/v1.30.0/deployment-apps-v1.json ... _definitions.json
    OUT/crds/servicemonitor-monitoring-v1.json ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from ruamel.yaml import YAML

KUBERNETES_VERSIONS: Final = ("1.30.0", "1.37.0")
"""The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and the newest the wheel
describes: the chart is validated against both."""

WHEEL_SHA256: Final = {
    "kubernetes_validate-1.37.0-py3-none-any.whl": (
        "85136d018a27b50ec7fc049d902bfa5193f5976807e6c0f408e3ab6fe078cad9"
    ),
}

CRDS: Final = {
    "github.com/prometheus-operator/prometheus-operator": (
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
        "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
    ),
    "github.com/kedacore/keda/v2": (
        "config/crd/bases/keda.sh_scaledobjects.yaml",
        "config/crd/bases/keda.sh_triggerauthentications.yaml",
    ),
}

_ABSOLUTE_DEFINITIONS: Final = '"/api/_definitions.json#'
_RELATIVE_DEFINITIONS: Final = '"_definitions.json#'


def kubernetes_schemas(wheel: Path, out: Path) -> None:
    """Copy the strict schemas of :data:`KUBERNETES_VERSIONS` out of the wheel."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if WHEEL_SHA256.get(wheel.name) != digest:
        raise SystemExit(f"{wheel.name}: sha256 {digest} is not the pinned one")
    with zipfile.ZipFile(wheel) as archive:
        for version in KUBERNETES_VERSIONS:
            prefix = f"kubernetes_validate/kubernetes-json-schema/v{version}-local-strict/"
            target = out / "kubernetes" / f"v{version}"
            target.mkdir(parents=True, exist_ok=True)
            names = [name for name in archive.namelist() if name.startswith(prefix)]
            if not names:
                raise SystemExit(f"{wheel.name} has no schemas of Kubernetes {version}")
            for name in names:
                schema = json.loads(archive.read(name))
                schema.pop("$id", None)
                text = json.dumps(schema).replace(_ABSOLUTE_DEFINITIONS, _RELATIVE_DEFINITIONS)
                (target / name.removeprefix(prefix)).write_text(text)


def _modules(listing: Path) -> Iterator[dict[str, Any]]:
    """The objects of ``go mod download -json`` (one after another, not a JSON array)."""
    text = listing.read_text()
    decoder = json.JSONDecoder()
    at = 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        module, at = decoder.raw_decode(text, at)
        if "Error" in module:
            raise SystemExit(f"{module['Path']}: {module['Error']}")
        yield module


def strict(schema: Any) -> Any:
    """``schema`` with unknown properties refused wherever it lists the known ones."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("format") == "int-or-string":
        return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    result = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in result
        and "additionalProperties" not in result
        and not result.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


def crd_schemas(listing: Path, out: Path) -> None:
    """One strict JSON Schema per version of each CRD in :data:`CRDS`."""
    target = out / "crds"
    target.mkdir(parents=True, exist_ok=True)
    found = {module["Path"]: Path(module["Dir"]) for module in _modules(listing)}
    for module, files in CRDS.items():
        if module not in found:
            raise SystemExit(f"{module} was not downloaded")
        for file in files:
            crd = YAML(typ="safe").load((found[module] / file).read_text())
            group = crd["spec"]["group"].split(".")[0]
            kind = crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = strict(version["schema"]["openAPIV3Schema"])
                name = f"{kind}-{group}-{version['name']}".lower()
                (target / f"{name}.json").write_text(json.dumps(schema, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--modules", type=Path, required=True)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    kubernetes_schemas(args.wheel, args.out)
    crd_schemas(args.modules, args.out)


if __name__ == "__main__":
    main()
