"""The spec's tables, generated from the definitions the AsyncAPI document is built from (pure).

``schemas/events/README.md`` is prose written by people, with generated tables between markers::

    <!-- generated: NAME (spectral contracts export) -->
    ...
    <!-- end generated: NAME -->

:func:`readme_tables` renders every table from the registry and :mod:`contracts.dead_letters`;
:func:`fill_tables` puts them between their markers. ``spectral contracts export`` writes the
result and ``--check`` fails when the checked-in text differs, so a table is never edited by
hand and the README and ``asyncapi.json`` say the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from contracts.dead_letters import DEAD_LETTER_HEADERS, REDRIVE_HEADERS, REFUSALS
from contracts.envelope import ENVELOPE_FIELDS, EventEnvelope
from contracts.fields import RFC3339_PATTERN

if TYPE_CHECKING:
    from contracts.registry import EventRegistry

_BLOCK: Final = re.compile(
    r"(<!-- generated: (?P<name>[a-z-]+) \(spectral contracts export\) -->\n)"
    r"(?P<body>.*?)"
    r"(<!-- end generated: (?P=name) -->)",
    re.DOTALL,
)


def readme_tables(registry: EventRegistry) -> dict[str, str]:
    """Table name -> Markdown (ending in a newline) of every generated table."""
    return {
        "envelope": _envelope(),
        "event-types": _event_types(registry),
        "reasons": _table(("reason", "when"), [(f"`{r.reason}`", r.when) for r in REFUSALS]),
        "dead-letter-headers": _table(
            ("header", "what it holds"), [(f"`{h.name}`", h.meaning) for h in DEAD_LETTER_HEADERS]
        ),
        "redrive-headers": _table(
            ("header", "what it holds"), [(f"`{h.name}`", h.meaning) for h in REDRIVE_HEADERS]
        ),
    }


def fill_tables(text: str, tables: Mapping[str, str]) -> str:
    """``text`` with every marked block replaced by its table; ValueError when a marked block
    names no table. Tables without a block in ``text`` are left out (a plugin's README may
    hold only some)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in tables:
            known = ", ".join(sorted(tables))
            raise ValueError(f"the block {name!r} names no generated table (known: {known})")
        return f"{match.group(1)}{tables[name]}{match.group(4)}"

    return _BLOCK.sub(replace, text)


def blocks_in(text: str) -> list[str]:
    """The names of the generated blocks in ``text``, in order."""
    return [match.group("name") for match in _BLOCK.finditer(text)]


def _envelope() -> str:
    """Section 1's table: each envelope field, its type (from its JSON Schema) and its rule (the
    field's description, the same text the JSON Schemas and the AsyncAPI document carry)."""
    properties = EventEnvelope[Any].model_json_schema()["properties"]
    fields = EventEnvelope.model_fields
    rows = [
        (f"`{name}`", _type_label(properties[name]), _text(fields[name].description or ""))
        for name in ENVELOPE_FIELDS
    ]
    return _table(("field", "type", "rule"), rows)


def _type_label(schema: Mapping[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_type_label(option) for option in schema["anyOf"])
    kind = str(schema.get("type", "object"))
    labels = (  # the first that applies
        (schema.get("format") == "uuid", "UUID string"),
        (schema.get("pattern") == RFC3339_PATTERN, "timestamp"),
        (kind == "null", "`null`"),
        (kind == "string" and schema.get("minLength") == 1, "non-empty string"),
        (kind == "integer" and "minimum" in schema, f"integer >= {schema.get('minimum')}"),
    )
    return next((label for applies, label in labels if applies), kind)


def _text(description: str) -> str:
    """A docstring as one Markdown table cell."""
    return " ".join(description.split())


def _event_types(registry: EventRegistry) -> str:
    rows = [
        (
            f"`{spec.event_type}`",
            str(spec.schema_version),
            "any producer" if spec.open_to_producers else "spectral only",
            _rule(spec.idempotency_key_rule),
            _rule(spec.record_key_rule),
        )
        for spec in registry.specs()
    ]
    header = ("event type", "version", "who publishes", "`idempotency_key`", "Kafka record key")
    return _table(header, rows)


def _rule(rule: str | None) -> str:
    return "(the type's own rule)" if rule is None else f"`{rule}`"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
        *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows),
    ]
    return "\n".join(lines) + "\n"


__all__ = ["blocks_in", "fill_tables", "readme_tables"]
