"""JSON Schemas of the envelopes, and the additive-only rule between two versions of one.

``render_event_schemas`` gives, for every registered type, the file name
``<event_type>.v<schema_version>.json`` and its text: the JSON Schema (draft 2020-12) of the
whole envelope with that payload, keys sorted, two-space indent, trailing newline.
``spectral contracts export`` writes them to ``schemas/events/``.

``breaking_changes(old, new)`` lists what makes ``new`` not additive over ``old``: a property
removed (or renamed), a property whose type changed (type, format, enum, const, pattern, bounds,
nullability, item type; descriptions and titles do not count), a property newly required or no
longer required, or an object that stopped accepting unknown properties. New optional
properties are fine, also inside nested objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from contracts.canonical import MAX_SAFE_INTEGER
from contracts.fields import NO_NUL_PATTERN, RFC3339_PATTERN, TIMESTAMP_NOTE

if TYPE_CHECKING:
    from contracts.registry import EventRegistry
    from contracts.spec import EventSpec

JSON_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
JSON_VALUE: Final = "JsonValue"
"""``$defs`` name of any JSON value without U+0000 (unknown fields, free-form objects)."""
HASHED_JSON_VALUE: Final = "HashedJsonValue"
"""``$defs`` name of a JSON value a hashed payload may hold: no U+0000, integers only."""
_NO_NUL: Final = {"pattern": NO_NUL_PATTERN}
_ANNOTATIONS: Final = frozenset({"title", "description", "examples", "default", "$comment"})
_STRUCTURAL: Final = frozenset({"properties", "required", "items", "anyOf", "$ref", "$defs"})


def schema_file_name(spec: EventSpec[Any]) -> str:
    """``<event_type>.v<schema_version>.json``."""
    return f"{spec.event_type}.v{spec.schema_version}.json"


def envelope_json_schema(spec: EventSpec[Any]) -> dict[str, Any]:
    """The JSON Schema of an envelope carrying ``spec``'s payload (validation mode)."""
    schema = spec.envelope_model.model_json_schema(mode="validation")
    schema["$schema"] = JSON_SCHEMA_DIALECT
    schema["$id"] = schema_file_name(spec)
    schema["title"] = f"{spec.event_type} v{spec.schema_version}"
    schema["description"] = (
        f"Kafka record value of {spec.event_type} (schema_version {spec.schema_version}): "
        "the spectral event envelope with its typed payload."
    )
    properties = schema["properties"]
    properties["event_type"] = {**properties["event_type"], "const": spec.event_type}
    _note_timestamp_format(schema)
    defs = schema.setdefault("$defs", {})
    payload_name = spec.payload_model.__name__
    hashed = _hashed_defs(defs, payload_name) if spec.hashed_payload else set()
    for name, node in defs.items():
        _forbid_nul(node, HASHED_JSON_VALUE if name in hashed else JSON_VALUE)
    _forbid_nul(schema, JSON_VALUE)  # the envelope (it skips $defs, done above)
    defs[JSON_VALUE] = _json_value_schema(hashed=False)
    if hashed:
        defs[HASHED_JSON_VALUE] = _json_value_schema(hashed=True)
    return schema


def _json_value_schema(*, hashed: bool) -> dict[str, Any]:
    """Any JSON value whose strings and member names hold no U+0000; in a hashed payload its
    numbers are integers in the I-JSON range. (Nesting depth cannot be said in JSON Schema: the
    spec names that rule.)"""
    own = f"#/$defs/{HASHED_JSON_VALUE if hashed else JSON_VALUE}"
    number: dict[str, Any] = (
        {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER}
        if hashed
        else {"type": "number"}
    )
    return {
        "description": (
            "A JSON value without U+0000 in any string or member name"
            + ("; numbers are integers within +/-(2^53 - 1)." if hashed else ".")
        ),
        "anyOf": [
            {"type": "string", **_NO_NUL},
            number,
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": {"$ref": own}},
            {"type": "object", "propertyNames": _NO_NUL, "additionalProperties": {"$ref": own}},
        ],
    }


def _hashed_defs(defs: dict[str, Any], root: str) -> set[str]:
    """The ``$defs`` reachable from the payload definition ``root`` (all of them hashed)."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        todo.extend(_refs(defs[name]))
    return seen


def _refs(node: object) -> list[str]:
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    if isinstance(node, dict):
        own = node.get("$ref")
        found = [own.removeprefix("#/$defs/")] if isinstance(own, str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    return []


def _forbid_nul(node: object, unknown: str) -> None:
    """Say in the schema what decode enforces for every string: no U+0000. A string without a
    pattern gets one (patterns already there exclude it), an object's member names get one,
    and an object that accepts unknown members types them as ``unknown`` (a JSON value
    without U+0000, integers only where the payload is hashed)."""
    if isinstance(node, list):
        for item in node:
            _forbid_nul(item, unknown)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "string" and not {"pattern", "const", "enum"} & node.keys():
        node["pattern"] = NO_NUL_PATTERN
    if node.get("type") == "object" or "properties" in node:
        node["propertyNames"] = dict(_NO_NUL)
        if node.get("additionalProperties", True) is True:
            node["additionalProperties"] = {"$ref": f"#/$defs/{unknown}"}
    for key, value in node.items():
        if key not in {"additionalProperties", "propertyNames", "$defs"}:
            _forbid_nul(value, unknown)


def _note_timestamp_format(node: object) -> None:
    """Field descriptions replace the type's; put the timestamp format back after them."""
    if isinstance(node, list):
        for item in node:
            _note_timestamp_format(item)
    elif isinstance(node, dict):
        if node.get("pattern") == RFC3339_PATTERN and TIMESTAMP_NOTE not in node["description"]:
            node["description"] = f"{node['description']} {TIMESTAMP_NOTE}"
        for value in node.values():
            _note_timestamp_format(value)


def render_schema(schema: dict[str, Any]) -> str:
    """Deterministic text of a schema: sorted keys, two-space indent, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_event_schemas(registry: EventRegistry) -> dict[str, str]:
    """File name -> schema text for every type in ``registry``."""
    return {
        schema_file_name(spec): render_schema(envelope_json_schema(spec))
        for spec in registry.specs()
    }


def schema_violations(current: Mapping[str, str], checked_in: Mapping[str, str]) -> list[str]:
    """Breaking changes of each current schema file against the checked-in files of its event
    type with the same or a lower version (file name -> text on both sides; no I/O here).
    """
    out: list[str] = []
    for name in sorted(current):
        event_type, version = _split_file_name(name)
        new = json.loads(current[name])
        for old_name in sorted(checked_in):
            old_type, old_version = _split_file_name(old_name)
            if old_type != event_type or old_version > version:
                continue
            old = json.loads(checked_in[old_name])
            out.extend(f"{name} vs {old_name}: {change}" for change in breaking_changes(old, new))
    return out


def _split_file_name(name: str) -> tuple[str, int]:
    stem = name.removesuffix(".json")
    event_type, _, version = stem.rpartition(".v")
    if not event_type or not version.isdigit():
        raise ValueError(f"{name!r} is not named <event_type>.v<schema_version>.json")
    return event_type, int(version)


def breaking_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Every way ``new`` is not an additive extension of ``old`` (empty when it is)."""
    comparison = _Comparison(old.get("$defs", {}), new.get("$defs", {}))
    comparison.run(old, new, "$")
    return comparison.out


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        resolved: dict[str, Any] = defs[ref.removeprefix("#/$defs/")]
        return resolved
    return schema


class _Comparison:
    """Walks an old and a new schema side by side, collecting breaking changes."""

    def __init__(self, old_defs: dict[str, Any], new_defs: dict[str, Any]) -> None:
        self.old_defs, self.new_defs = old_defs, new_defs
        self.out: list[str] = []
        self._seen: set[tuple[int, int]] = set()

    def run(self, old: dict[str, Any], new: dict[str, Any], path: str) -> None:
        old, new = _resolve(old, self.old_defs), _resolve(new, self.new_defs)
        if (id(old), id(new)) in self._seen:
            return
        self._seen.add((id(old), id(new)))
        if _shape(old) != _shape(new):
            self.out.append(f"{path}: type changed from {_shape(old)} to {_shape(new)}")
            return
        if "properties" in old or "properties" in new:
            self._object(old, new, path)
        if "items" in old:
            self.run(old["items"], new["items"], f"{path}[]")
        alternatives = zip(old.get("anyOf", ()), new.get("anyOf", ()), strict=True)
        for index, (old_alt, new_alt) in enumerate(alternatives):
            self.run(old_alt, new_alt, f"{path}<{index}>")

    def _object(self, old: dict[str, Any], new: dict[str, Any], path: str) -> None:
        old_props, new_props = old.get("properties", {}), new.get("properties", {})
        for name in sorted(old_props):
            if name in new_props:
                self.run(old_props[name], new_props[name], f"{path}.{name}")
            else:
                self.out.append(f"{path}.{name}: removed (or renamed)")
        old_required, new_required = set(old.get("required", ())), set(new.get("required", ()))
        self.out.extend(
            f"{path}.{name}: newly required" for name in sorted(new_required - old_required)
        )
        self.out.extend(
            f"{path}.{name}: no longer required (readers of the old version need it)"
            for name in sorted(old_required - new_required)
            if name in new_props
        )


def _shape(schema: dict[str, Any]) -> dict[str, Any]:
    """The keywords that make a schema's type, minus annotations and what is compared deeper."""
    shape = {k: v for k, v in schema.items() if k not in _ANNOTATIONS and k not in _STRUCTURAL}
    if "items" in schema:
        shape["items"] = "..."
    if "anyOf" in schema:
        shape["anyOf"] = len(schema["anyOf"])
    if "properties" in schema:
        shape["type"] = "object"
    return shape
