"""The MCP tools reference: every tool ``spectral mcp`` offers, from the server it builds."""

from __future__ import annotations

import asyncio
from typing import Any

from docs.gen import GENERATED
from docs.gen.http import _constraints, _type
from docs.gen.text import cell, code, with_rules


def tools() -> list[Any]:
    """The tools of the server ``spectral mcp`` composes (nothing is connected)."""
    from spectral.cli.api import resources_for  # noqa: PLC0415 - imported when rendering
    from spectral.cli.mcp import build_mcp  # noqa: PLC0415
    from spectral.devstack import Endpoints  # noqa: PLC0415
    from spectral.settings import Settings  # noqa: PLC0415

    endpoints = Endpoints(kafka_bootstrap="kafka:9092", database_url="postgresql://x@db/x")
    server = build_mcp(resources_for(Settings(), endpoints, submits_work=False), [])
    return list(asyncio.run(server.list_tools()))


def render() -> str:
    out = [
        GENERATED,
        "",
        "# MCP tools",
        "",
        (
            "`spectral mcp` serves these tools to agents over stdio or streamable HTTP, acting "
            "through the same roles and token scopes as the HTTP API; each tool's description "
            "names the scope it needs. How to connect an agent: [Give an agent the MCP "
            "tools](../howto/surfaces/mcp.md)."
        ),
        "",
    ]
    for tool in tools():
        out += [f"## {code(tool.name)}", "", (tool.description or "").strip(), ""]
        schema = tool.input_schema
        properties = schema.get("properties", {})
        if not properties:
            out += ["No arguments.", ""]
            continue
        required = set(schema.get("required", ()))
        out += ["| argument | type | required | meaning |", "| --- | --- | --- | --- |"]
        for name, sub in properties.items():
            meaning = cell(sub.get("description", ""))
            meaning = with_rules(meaning, _constraints(sub))
            out.append(
                f"| {code(name)} | {_type(sub)} | {'yes' if name in required else ''} | {meaning} |"
            )
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
