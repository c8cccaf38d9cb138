"""The alerts reference: every Prometheus alerting rule spectral ships, with its runbook.

Read from ``deploy/prometheus/spectral-alerts.yaml``: one section per alert (its anchor is the
alert's name in lower case), with its severity, expression, summary and what to do.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from docs.gen import GENERATED, ROOT

RULES: Final = ROOT / "deploy" / "prometheus" / "spectral-alerts.yaml"


def alerts() -> list[tuple[str, dict[str, Any]]]:
    """Each rule group's name and each alerting rule, in file order."""
    document = yaml.safe_load(RULES.read_text("utf-8"))
    return [
        (group["name"], rule)
        for group in document.get("groups", [])
        for rule in group.get("rules", [])
        if "alert" in rule
    ]


def render() -> str:
    found = alerts()
    out = [
        GENERATED,
        "",
        "# Alerts",
        "",
        (
            f"The alerting rules of `deploy/prometheus/spectral-alerts.yaml` ({len(found)} "
            "rules), each tested with `promtool test rules` (`deploy/prometheus/tests/`, run by "
            "`make test`). Load the file with `rule_files: [spectral-alerts.yaml]`; [Health, "
            "metrics and alerts](../howto/deploy/health-and-alerts.md) says how to wire "
            "Prometheus and Grafana, and the [metrics reference](metrics.md) what each series "
            "means."
        ),
        "",
        "| alert | severity | group |",
        "| --- | --- | --- |",
    ]
    for group, rule in found:
        severity = rule.get("labels", {}).get("severity", "")
        out.append(f"| [{rule['alert']}](#{rule['alert'].lower()}) | {severity} | {group} |")
    out.append("")
    for group, rule in found:
        name = rule["alert"]
        labels = rule.get("labels", {})
        notes = rule.get("annotations", {})
        out += [f"## {name} {{#{name.lower()}}}", ""]
        facts = [f"**Severity:** {labels.get('severity', '—')}", f"**group:** {group}"]
        if "for" in rule:
            facts.append(f"**for:** {rule['for']}")
        out += [", ".join(facts) + ".", ""]
        if notes.get("summary"):
            out += [f"**Summary:** {notes['summary'].strip()}", ""]
        out += ["```promql", str(rule["expr"]).strip(), "```", ""]
        for key, title in (("description", "What it means"), ("runbook", "What to do")):
            if notes.get(key):
                out += [f"**{title}.** {' '.join(str(notes[key]).split())}", ""]
        if not notes.get("runbook"):
            out += [
                (
                    "**What to do.** This rule has no runbook annotation yet: start from its "
                    "description above."
                ),
                "",
            ]
    return "\n".join(out).rstrip("\n") + "\n"
