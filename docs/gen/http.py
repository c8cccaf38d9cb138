"""The HTTP API reference: the OpenAPI document of ``spectral api``, rendered as a page.

The app is composed as ``spectral api`` composes it (nothing is connected: the document does not
depend on the servers), and its OpenAPI document is both rendered here and written beside the
page as ``openapi.json``.
"""

from __future__ import annotations

import json
from typing import Any, Final

from docs.gen import GENERATED
from docs.gen.text import anchor, cell, code, with_rules

METHODS: Final = ("get", "post", "put", "patch", "delete")


def document() -> dict[str, Any]:
    """The OpenAPI document ``spectral api`` serves at ``/openapi.json``."""
    from spectral.cli.api import compose_app  # noqa: PLC0415 - imported when rendering
    from spectral.devstack import Endpoints  # noqa: PLC0415
    from spectral.settings import Settings  # noqa: PLC0415

    app = compose_app(
        Settings(),
        Endpoints(kafka_bootstrap="kafka:9092", database_url="postgresql://spectral@db/spectral"),
        {},
    )
    return app.openapi()


def _schema_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _type(schema: dict[str, Any]) -> str:
    name = _schema_name(schema)
    if name is not None:
        return f"[{name}](#{anchor(name)})"
    if "anyOf" in schema:
        kinds = [_type(s) for s in schema["anyOf"] if s.get("type") != "null"]
        nullable = any(s.get("type") == "null" for s in schema["anyOf"])
        return " or ".join(kinds) + (" or null" if nullable else "")
    if "enum" in schema:
        return " \\| ".join(code(json.dumps(v)) for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return f"object of {_type(extra) if isinstance(extra, dict) else 'any'}"
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def _constraints(schema: dict[str, Any]) -> str:
    words = []
    for key, text in (
        ("minLength", "≥ {} chars"),
        ("maxLength", "≤ {} chars"),
        ("minimum", "≥ {}"),
        ("maximum", "≤ {}"),
        ("exclusiveMinimum", "> {}"),
        ("minItems", "≥ {} items"),
        ("maxItems", "≤ {} items"),
        ("pattern", "matches `{}`"),
    ):
        if key in schema:
            words.append(text.format(schema[key]))
    if "default" in schema:
        words.append(f"default {code(json.dumps(schema['default']))}")
    return "; ".join(words)


def _operation(path: str, method: str, op: dict[str, Any], out: list[str]) -> None:
    out += [f"### {method.upper()} {code(path)}", ""]
    out += [f"`{op['operationId']}`: {op.get('summary', '')}".rstrip(), ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    parameters = op.get("parameters", [])
    if parameters:
        out += ["| parameter | in | type | required | meaning |", "| --- | --- | --- | --- | --- |"]
        for p in parameters:
            schema = p.get("schema", {})
            constraints = _constraints(schema)
            out.append(
                f"| {code(p['name'])} | {p['in']} | {_type(schema)} | "
                f"{'yes' if p.get('required') else ''} | "
                f"{with_rules(cell(p.get('description', '')), constraints)} |"
            )
        out.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            out += [f"Body ({code(media)}): {_type(content.get('schema', {}))}", ""]
    out += ["| status | meaning | body |", "| --- | --- | --- |"]
    for status, response in sorted(op.get("responses", {}).items()):
        content = response.get("content", {})
        bodies = ", ".join(
            f"{_type(c.get('schema', {}))} ({code(media)})" for media, c in content.items()
        )
        out.append(f"| {status} | {cell(response.get('description', ''))} | {bodies} |")
    out.append("")


def _schema(name: str, schema: dict[str, Any], out: list[str]) -> None:
    out += [f"### {name}", ""]
    if schema.get("description"):
        out += [cell(schema["description"]), ""]
    if "enum" in schema:
        out += [
            "One of " + ", ".join(code(json.dumps(v)) for v in schema["enum"]) + ".",
            "",
        ]
        return
    properties = schema.get("properties", {})
    if not properties:
        out += [f"{_type(schema)}.", ""]
        return
    required = set(schema.get("required", ()))
    out += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
    for field, sub in properties.items():
        constraints = _constraints(sub)
        meaning = cell(sub.get("description", ""))
        meaning = with_rules(meaning, constraints)
        out.append(
            f"| {code(field)} | {_type(sub)} | {'yes' if field in required else ''} | {meaning} |"
        )
    if schema.get("additionalProperties") is False:
        out += ["", "No other field is accepted."]
    out.append("")


def render_json() -> str:
    """The document itself, beside the page."""
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def render() -> str:
    spec = document()
    out = [
        GENERATED,
        "",
        "# HTTP API",
        "",
        (
            "`spectral api` serves this API (and the web console). The same document is served "
            "at `/openapi.json`, with interactive docs at `/docs` and `/redoc`; a copy is "
            "[here](openapi.json). How to use it: [Use the HTTP "
            "API](../howto/surfaces/http-api.md)."
        ),
        "",
        spec["info"].get("description", "").strip(),
        "",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in spec["paths"].items():
        for method in METHODS:
            if method in operations:
                op = operations[method]
                by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((path, method, op))
    for tag, operations in by_tag.items():
        out += [f"## {tag.capitalize()}", ""]
        for path, method, op in operations:
            _operation(path, method, op, out)
    out += ["## Schemas", ""]
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        _schema(name, schema, out)
    return "\n".join(out).rstrip("\n") + "\n"
