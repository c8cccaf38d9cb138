"""The AsyncAPI 3 document of every topic, built from the registry (pure: no I/O).

One channel per registered event type (address ``{prefix}<event_type>``) and one per dead-letter
topic (``{prefix}<event_type>.dlq``); one message per event type whose payload is the type's
envelope JSON Schema (the same as ``schemas/events/<event_type>.v<N>.json``, its ``$defs``
moved to ``components.schemas``), with its Kafka key and headers; a ``send`` operation per
event type and a ``receive`` operation per consumer deployment. ``spectral contracts export``
writes it to ``schemas/events/asyncapi.json``; the suite validates it with the official AsyncAPI
parser.

What the registry does not know (which deployments consume which types, the settings the topics
are declared with) is passed in by the caller, so this module stays pure. The dead-letter reasons
and headers are :mod:`contracts.dead_letters`'s, the same definitions the spec's tables are
generated from.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from contracts.dead_letters import (
    DEAD_LETTER_HEADERS,
    DLQ_SUFFIX,
    REDRIVE_HEADERS,
    REFUSALS,
    Refusal,
)
from contracts.errors import RefusalReason
from contracts.fields import NO_NUL_PATTERN
from contracts.schemas import envelope_json_schema, render_schema
from contracts.wire import MAX_RECORD_BYTES

if TYPE_CHECKING:
    from contracts.registry import EventRegistry
    from contracts.spec import EventSpec

ASYNCAPI_FILE_NAME: Final = "asyncapi.json"
KAFKA_BINDING_VERSION: Final = "0.5.0"
_BINDING_SETTINGS: Final = ("cleanup.policy", "retention.ms", "max.message.bytes")
"""The topic settings the Kafka channel binding has fields for."""


@dataclass(frozen=True)
class TopicSettings:
    """How a topic is declared (``spectral topics apply``): its Kafka channel binding."""

    partitions: int
    replicas: int
    config: Mapping[str, str]


OTHER_RECORD_KEY: Final = "what its EventSpec.record_key derives from the payload"
"""How the record key of an event type without a ``record_key_rule`` is described."""
OTHER_IDEMPOTENCY_KEY: Final = "what its EventSpec.idempotency_key derives from the payload"
"""How the idempotency key of an event type without an ``idempotency_key_rule`` is described."""


def record_key_of(spec: EventSpec[Any]) -> tuple[str, str]:
    """The record key of ``spec``'s type as the document states it: its rule (a template over
    the payload's members) and its spelling (the member's pattern when the rule is one member,
    else text without U+0000)."""
    rule = spec.record_key_rule
    if rule is None:
        return OTHER_RECORD_KEY, NO_NUL_PATTERN
    member = re.fullmatch(r"\{(\w+)\}", rule)
    if member is None:
        return rule, NO_NUL_PATTERN
    schema = envelope_json_schema(spec)
    payload = schema["$defs"][spec.payload_model.__name__]["properties"][member.group(1)]
    return rule, str(payload.get("pattern", NO_NUL_PATTERN))


def asyncapi_document(
    registry: EventRegistry,
    *,
    receivers: Mapping[str, Sequence[str]],
    topics: Mapping[str, TopicSettings],
) -> dict[str, Any]:
    """The AsyncAPI 3.1 document; ``receivers`` maps an event type to the consumer deployments
    (and so consumer groups) that read it; ``topics`` the declared settings of every topic, by
    name without prefix."""
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for spec in registry.specs():
        name = _message_name(spec)
        schema = envelope_json_schema(spec)
        for def_name, definition in schema.pop("$defs", {}).items():
            _add_schema(schemas, def_name, definition)
        for key in ("$schema", "$id"):
            schema.pop(key, None)
        _add_schema(schemas, name, schema)
        messages[name] = _message(spec, name)
        channel = _channel_id(spec.event_type)
        channels[channel] = _channel(spec, name, topics[spec.event_type])
        operations[_send_operation_id(spec, channel)] = _send(spec, channel, name)
        for consumer in receivers.get(spec.event_type, ()):
            operations[f"{_id(consumer)}_receives_{channel}"] = _receive(consumer, channel, name)
        dlq = f"{channel}_dlq"
        channels[dlq] = _dlq_channel(spec.event_type, topics[spec.event_type + DLQ_SUFFIX])
        for consumer in receivers.get(spec.event_type, ()):
            operations[f"{_id(consumer)}_dead_letters_{channel}"] = {
                "action": "send",
                "title": f"{consumer} dead-letters {spec.event_type}",
                "summary": "A record the consumer refused, with its original key, bytes and "
                "headers and why (it is never dropped).",
                "channel": {"$ref": f"#/channels/{dlq}"},
                "messages": [{"$ref": f"#/channels/{dlq}/messages/DeadLetter"}],
            }
    messages["DeadLetter"] = _dead_letter_message()
    return {
        "asyncapi": "3.1.0",
        "info": {
            "title": "spectral events",
            "version": "1.0.0",
            "description": (
                "Typed events on Kafka, materialized exactly once into PostgreSQL. The wire "
                "specification (envelope, keys, snapshot_hash, timestamps, refusal reasons, "
                "codecs, topics) is schemas/events/README.md; this document is generated from "
                "the same registry as the JSON Schemas beside it."
            ),
            "license": {"name": "Apache-2.0"},
        },
        "defaultContentType": "application/json",
        "servers": {
            "kafka": {
                "host": "{bootstrap}",
                "protocol": "kafka",
                "description": "Any Kafka cluster (brokers 3.x/4.x); SPECTRAL_KAFKA_BOOTSTRAP.",
                "variables": {
                    "bootstrap": {
                        "default": "localhost:9092",
                        "description": "host:port of a bootstrap broker",
                    }
                },
                "bindings": {"kafka": {"bindingVersion": KAFKA_BINDING_VERSION}},
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": schemas},
    }


def render_asyncapi(document: dict[str, Any]) -> str:
    """Deterministic text: sorted keys, two-space indent, trailing newline."""
    return render_schema(document)


def _message_name(spec: EventSpec[Any]) -> str:
    return f"{spec.event_type}.v{spec.schema_version}"


def _channel_id(event_type: str) -> str:
    return _id(event_type)


def _id(text: str) -> str:
    return text.replace(".", "_").replace("-", "_")


def _add_schema(schemas: dict[str, Any], name: str, schema: dict[str, Any]) -> None:
    rewritten = _rewrite_refs(copy.deepcopy(schema))
    if name in schemas and schemas[name] != rewritten:
        raise ValueError(f"two different schemas are both named {name!r}")
    schemas[name] = rewritten


def _rewrite_refs(node: Any) -> Any:
    if isinstance(node, list):
        return [_rewrite_refs(item) for item in node]
    if isinstance(node, dict):
        out = {key: _rewrite_refs(value) for key, value in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = "#/components/schemas/" + ref.removeprefix("#/$defs/")
        return out
    return node


def _prefix_parameter() -> dict[str, Any]:
    return {
        "prefix": {
            "default": "",
            "description": "The deployment's topic prefix (SPECTRAL_TOPIC_PREFIX), often empty.",
        }
    }


def _binding(settings: TopicSettings) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for name in _BINDING_SETTINGS:
        if name in settings.config:
            value = settings.config[name]
            config[name] = value.split(",") if name == "cleanup.policy" else int(value)
    return {
        "kafka": {
            "partitions": settings.partitions,
            "replicas": settings.replicas,
            "topicConfiguration": config,
            "bindingVersion": KAFKA_BINDING_VERSION,
        }
    }


def _send_operation_id(spec: EventSpec[Any], channel: str) -> str:
    return f"publish_{channel}" if spec.open_to_producers else f"spectral_publishes_{channel}"


def _send(spec: EventSpec[Any], channel: str, message: str) -> dict[str, Any]:
    if spec.open_to_producers:
        title = f"Publish {spec.event_type}"
        summary = f"Any producer may publish {spec.event_type} events (one record each)."
    else:
        title = f"spectral publishes {spec.event_type}"
        summary = (
            f"Only spectral publishes {spec.event_type} events (through its outbox, in the "
            "transaction that changes what they announce). Outside producers must not publish "
            "them: they submit work through spectral's command API, and read these events."
        )
    return {
        "action": "send",
        "title": title,
        "summary": summary,
        "channel": {"$ref": f"#/channels/{channel}"},
        "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}],
    }


def _channel(spec: EventSpec[Any], message: str, settings: TopicSettings) -> dict[str, Any]:
    event_type = spec.event_type
    return {
        "address": f"{{prefix}}{event_type}",
        "title": event_type,
        "description": (
            f"Every {event_type} event, keyed by {record_key_of(spec)[0]} so one entity's "
            "events stay in order on one partition. `spectral topics apply` creates it with "
            "these settings (partitions: SPECTRAL_TOPIC_PARTITIONS; replicas: up to 3)."
        ),
        "parameters": _prefix_parameter(),
        "messages": {message: {"$ref": f"#/components/messages/{message}"}},
        "bindings": _binding(settings),
    }


def _dlq_channel(event_type: str, settings: TopicSettings) -> dict[str, Any]:
    return {
        "address": f"{{prefix}}{event_type}{DLQ_SUFFIX}",
        "title": f"{event_type}{DLQ_SUFFIX}",
        "description": (
            f"Dead letters of {event_type}: records a consumer refused, with their original "
            "key, value and headers, plus the dlq.* headers saying why and where from."
        ),
        "parameters": _prefix_parameter(),
        "messages": {"DeadLetter": {"$ref": "#/components/messages/DeadLetter"}},
        "bindings": _binding(settings),
    }


def _message(spec: EventSpec[Any], name: str) -> dict[str, Any]:
    rule, pattern = record_key_of(spec)
    redrive = {
        header.name: {
            "type": "string",
            "description": f"Only on a record redriven from its dead letter: {header.meaning}.",
        }
        for header in REDRIVE_HEADERS
    }
    return {
        "name": name,
        "title": f"{spec.event_type} (schema_version {spec.schema_version})",
        "summary": spec.payload_model.__doc__ or spec.event_type,
        "contentType": "application/json",
        "payload": {"$ref": f"#/components/schemas/{name}"},
        "headers": {
            "type": "object",
            "description": "Kafka headers (UTF-8 values) repeating two envelope fields; "
            "readers use the envelope, never the headers.",
            "properties": {
                "event_type": {"type": "string", "const": spec.event_type},
                "idempotency_key": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The envelope's idempotency_key: "
                    f"`{spec.idempotency_key_rule or OTHER_IDEMPOTENCY_KEY}` (the payload's "
                    "members as written).",
                },
                "outbox.ready_at": {
                    "type": "string",
                    "format": "date-time",
                    "description": "Optional, informational: when the record's outbox row became "
                    "publishable (RFC 3339, the producer database's clock), added by spectral's "
                    "outbox relay; consumers measure end-to-end freshness from it.",
                },
                **redrive,
            },
        },
        "bindings": {
            "kafka": {
                "key": {
                    "type": "string",
                    "minLength": 1,
                    "pattern": pattern,
                    "description": f"The record key, `{rule}` (the payload's members as "
                    "written), as UTF-8 bytes; never null, never empty.",
                },
                "bindingVersion": KAFKA_BINDING_VERSION,
            }
        },
    }


def _receive(consumer: str, channel: str, message: str) -> dict[str, Any]:
    return {
        "action": "receive",
        "title": f"{consumer} consumes",
        "summary": (
            f"The {consumer} deployment (consumer group {consumer!r} by default) applies each "
            "record exactly once and dead-letters what it refuses."
        ),
        "channel": {"$ref": f"#/channels/{channel}"},
        "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}],
        "bindings": {
            "kafka": {
                "groupId": {"type": "string", "default": consumer},
                "bindingVersion": KAFKA_BINDING_VERSION,
            }
        },
    }


def _dead_letter_message() -> dict[str, Any]:
    header_properties: dict[str, Any] = {
        header.name: {"type": "string", "description": f"{_sentence(header.meaning)}"}
        for header in DEAD_LETTER_HEADERS
    }
    header_properties["dlq.reason"]["oneOf"] = [
        {"const": refusal.reason, "description": _sentence(refusal.when)}
        for refusal in _unique_reasons()
    ]
    return {
        "name": "DeadLetter",
        "title": "A refused record",
        "summary": "The original record (key, value bytes, headers) and why it was refused.",
        "contentType": "application/octet-stream",
        "payload": {
            "description": (
                "The original record value byte for byte (it may not be JSON at all), or empty "
                f"for a reference to a record no producer could send (over {MAX_RECORD_BYTES} "
                "bytes and the dead-letter topic's limit): its size and sha256 are in dlq.detail."
            )
        },
        "headers": {
            "type": "object",
            "description": "Every dlq.* header below, always; then the original record's own "
            "headers (minus any dlq.* header it carried).",
            "required": [header.name for header in DEAD_LETTER_HEADERS],
            "properties": header_properties,
        },
        "bindings": {
            "kafka": {
                "key": {"description": "The original record's key, unchanged (may be null)."},
                "bindingVersion": KAFKA_BINDING_VERSION,
            }
        },
    }


def _unique_reasons() -> list[Refusal]:
    """Each reason once, with every step it is refused at (``invalid_envelope`` is two)."""
    merged: dict[RefusalReason, list[str]] = {}
    for refusal in REFUSALS:
        merged.setdefault(refusal.reason, []).append(refusal.when)
    return [Refusal(reason, "; or ".join(whens)) for reason, whens in merged.items()]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def document_text(
    registry: EventRegistry,
    *,
    receivers: Mapping[str, Sequence[str]],
    topics: Mapping[str, TopicSettings],
) -> str:
    """:func:`render_asyncapi` of :func:`asyncapi_document`."""
    document = asyncapi_document(registry, receivers=receivers, topics=topics)
    return render_asyncapi(document)


__all__ = [
    "ASYNCAPI_FILE_NAME",
    "OTHER_RECORD_KEY",
    "TopicSettings",
    "asyncapi_document",
    "document_text",
    "record_key_of",
]
