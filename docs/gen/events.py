"""The events reference: each event type's payload, from the JSON Schemas the contract exports.

The schemas in ``schemas/events/`` are generated from ``contracts/`` (and checked there); this
page renders each one's payload fields. The envelope every record shares is described in the
[wire contract](wire-contract.md).
"""

from __future__ import annotations

import json
from typing import Any, Final

from docs.gen import GENERATED, ROOT
from docs.gen.http import _constraints
from docs.gen.text import cell, code, with_rules

SCHEMAS: Final = ROOT / "schemas" / "events"


def _type(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return code(ref.rsplit("/", 1)[-1])
    if "anyOf" in schema:
        kinds = [_type(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(kinds) + (
            " or null" if any(s.get("type") == "null" for s in schema["anyOf"]) else ""
        )
    if "enum" in schema:
        return " \\| ".join(code(json.dumps(v)) for v in schema["enum"])
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def _table(schema: dict[str, Any], out: list[str]) -> None:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    out += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
    for name, sub in properties.items():
        meaning = cell(sub.get("description", ""))
        constraints = _constraints({k: v for k, v in sub.items() if k != "pattern"})
        meaning = with_rules(meaning, constraints)
        out.append(
            f"| {code(name)} | {_type(sub)} | {'yes' if name in required else ''} | {meaning} |"
        )
    out.append("")


def render() -> str:
    out = [
        GENERATED,
        "",
        "# Event types",
        "",
        (
            "The payload of each event type spectral publishes, from the JSON Schemas in "
            "`schemas/events/` (generated from `contracts/` by `spectral contracts export`). "
            "Every record wraps its payload in the envelope of the [wire "
            "contract](wire-contract.md); the AsyncAPI document of every topic is "
            "`schemas/events/asyncapi.json`, shipped in the package as "
            "`spectral_schemas/events/asyncapi.json`."
        ),
        "",
    ]
    for path in sorted(SCHEMAS.glob("*.v*.json")):
        schema = json.loads(path.read_text("utf-8"))
        out += [f"## {code(schema.get('title', path.stem))}", "", f"File: `{path.name}`.", ""]
        definitions = schema.get("$defs", {})
        payload = schema.get("properties", {}).get("payload", {})
        name = payload.get("$ref", "").rsplit("/", 1)[-1]
        for def_name, definition in definitions.items():
            if "properties" not in definition:
                continue
            title = "Payload" if def_name == name else code(def_name)
            out += [f"**{title}**" + (f" ({code(def_name)})" if def_name == name else "") + ":", ""]
            if definition.get("description"):
                out += [cell(definition["description"]), ""]
            _table(definition, out)
    return "\n".join(out).rstrip("\n") + "\n"
