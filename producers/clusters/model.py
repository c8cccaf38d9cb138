"""Values of the failure-cluster producer: the ingested observation and a cluster's facts.

Clustering rule (documented here because it is the input contract): failures group by
``(workspace_id, rule_id, signature)``. ``signature`` is the scan system's failure signature
when the line carries one; otherwise it is derived from the summary by :func:`derive_signature`
(lowercased, numbers and identifiers masked, whitespace collapsed), so "timeout after 30s on
host 10.0.0.7" and "Timeout after 45s on host 10.0.0.9" fall into the same cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final
from uuid import UUID

import orjson
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from contracts.failure_cluster import MAX_FAILURE_ID_CHARS, MAX_SUMMARY_CHARS
from contracts.fields import UtcDatetime
from producers.clusters.severity import Criticality
from spectral.errors import PermanentError

MAX_SIGNATURE_CHARS: Final = 512

_UUID_LIKE = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_HEX_LIKE = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b")
_NUMBER = re.compile(r"\d+(?:[.:]\d+)*")
_SPACE = re.compile(r"\s+")


def derive_signature(summary: str) -> str:
    """The grouping signature of a failure without one: its summary with the variable parts
    (identifiers, hex digests, numbers, addresses) masked, lowercased, whitespace collapsed."""
    text = summary.lower()
    text = _UUID_LIKE.sub("<id>", text)
    text = _HEX_LIKE.sub("<hex>", text)
    text = _NUMBER.sub("#", text)
    text = _SPACE.sub(" ", text).strip()
    return (text or "<empty>")[:MAX_SIGNATURE_CHARS]


class FailureObservation(BaseModel):
    """One rule-evaluation failure observed in a customer scan (one JSON line of ingest).

    Other fields of the line are kept as ``attributes``.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    failure_id: Annotated[str, StringConstraints(min_length=1, max_length=MAX_FAILURE_ID_CHARS)]
    rule_id: UUID
    workspace_id: UUID
    observed_at: UtcDatetime
    summary: Annotated[str, StringConstraints(max_length=MAX_SUMMARY_CHARS)]
    signature: (
        Annotated[str, StringConstraints(min_length=1, max_length=MAX_SIGNATURE_CHARS)] | None
    ) = None

    @property
    def grouping_signature(self) -> str:
        return self.signature if self.signature is not None else derive_signature(self.summary)

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class InvalidLineError(PermanentError, ValueError):
    """A line of ingest input that is not a valid failure observation."""


def parse_line(line: str | bytes) -> FailureObservation:
    """Parse one JSON line; raise InvalidLineError with a one-line reason."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InvalidLineError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidLineError("not a JSON object")
    try:
        return FailureObservation.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "line"
        raise InvalidLineError(f"{where}: {first['msg']}") from None


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What a cluster is right now, read under its row lock."""

    cluster_id: UUID
    workspace_id: UUID
    rule_id: UUID
    signature: str
    revision: int
    published_hash: str | None
    failure_count: int
    first_observed_at: datetime
    last_observed_at: datetime
    recent_count: int
    criticality: Criticality
