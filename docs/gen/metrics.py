"""The metrics reference: every instrument, read from the registries the code fills.

Each class that owns instruments takes the ``CollectorRegistry`` to register them in (an
injected registry, label sets fixed at construction). The generator imports the modules of
spectral that mention ``CollectorRegistry``, builds every such class on a fresh registry (a
text parameter gets a placeholder value), and reads back each metric's name, type, help and
label names, and the label values the class fixes at construction (a bounded set).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client import CollectorRegistry

from docs.gen import GENERATED, ROOT
from docs.gen.text import cell, code

PACKAGES: Final = ("spectral", "producers", "consumers")
PLACEHOLDER: Final = "NAME"
"""What a text parameter of a metrics class (a consumer's name) is built with."""


@dataclass
class Metric:
    name: str
    kind: str
    documentation: str
    labels: list[str]
    owner: str
    values: dict[str, set[str]] = field(default_factory=dict)


def _modules() -> Iterator[str]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "CollectorRegistry" not in path.read_text("utf-8"):
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _buildable(cls: type) -> dict[str, Any] | None:
    """Arguments that build ``cls`` on a fresh registry, or None if it takes none."""
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return None
    if "registry" not in parameters:
        return None
    arguments: dict[str, Any] = {}
    for name, parameter in parameters.items():
        if name == "registry":
            arguments[name] = CollectorRegistry()
        elif parameter.default is not inspect.Parameter.empty:
            continue
        elif parameter.annotation in {"str", str}:
            arguments[name] = PLACEHOLDER
        else:
            return None
    return arguments


def _owners() -> Iterator[tuple[str, CollectorRegistry]]:
    seen: set[type] = set()
    for module_name in _modules():
        module = importlib.import_module(module_name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                cls in seen
                or cls.__module__ != module_name
                or getattr(cls, "__abstractmethods__", None)
            ):
                continue
            seen.add(cls)
            arguments = _buildable(cls)
            if arguments is None:
                continue
            registry = arguments["registry"]
            try:
                cls(**arguments)
            except Exception:  # noqa: BLE001, S112 - a class that needs more than a registry
                continue
            yield f"{cls.__module__}.{cls.__qualname__}", registry


def collect() -> dict[str, Metric]:
    """Every metric, by its exposed name."""
    metrics: dict[str, Metric] = {}
    for owner, registry in _owners():
        for collector in list(registry._collector_to_names):  # noqa: SLF001 - the registry's own index
            described = list(collector.describe()) if hasattr(collector, "describe") else []
            labels = list(getattr(collector, "_labelnames", ()))
            for family in described or list(collector.collect()):
                name = family.name + ("_total" if family.type == "counter" else "")
                found = metrics.setdefault(
                    name,
                    Metric(name, family.type, family.documentation, labels, owner),
                )
                if not found.labels:
                    found.labels = labels or list(getattr(family, "_labelnames", ()))
        for family in registry.collect():
            name = family.name + ("_total" if family.type == "counter" else "")
            if name not in metrics:
                continue
            for sample in family.samples:
                for label, value in sample.labels.items():
                    if label in metrics[name].labels and value != PLACEHOLDER:
                        metrics[name].values.setdefault(label, set()).add(value)
    return metrics


def _component(owner: str) -> str:
    return owner.rsplit(".", 1)[0]


def render() -> str:
    metrics = collect()
    out = [
        GENERATED,
        "",
        "# Metrics",
        "",
        (
            "Every instrument spectral exports, read from the registries its components fill. A "
            "long-running command serves its own on `--metrics-port` (`/metrics`, beside "
            "`/healthz` and `/readyz`): see [Health, metrics and "
            "alerts](../howto/deploy/health-and-alerts.md). Every label takes its values from a "
            "bounded set; where the code fixes the set when the instrument is made, the values "
            "are listed. The alerts built on these are in the [alerts reference](alerts.md)."
        ),
        "",
    ]
    by_component: dict[str, list[Metric]] = {}
    for metric in metrics.values():
        by_component.setdefault(_component(metric.owner), []).append(metric)
    for component in sorted(by_component):
        out += [f"## {code(component)}", "", "| metric | type | labels | meaning |"]
        out.append("| --- | --- | --- | --- |")
        for metric in sorted(by_component[component], key=lambda m: m.name):
            labels = []
            for label in metric.labels:
                values = sorted(metric.values.get(label, ()))
                labels.append(
                    code(label) + (f" ({', '.join(code(v) for v in values)})" if values else "")
                )
            out.append(
                f"| {code(metric.name)} | {metric.kind} | {'; '.join(labels) or '—'} "
                f"| {cell(metric.documentation)} |"
            )
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
