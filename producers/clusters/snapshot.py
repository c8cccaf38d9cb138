"""Building snapshots and the rule-stub request. Pure: no I/O.

Snapshots are built ONLY by the contracts helper ``failure_cluster_detected_event``, which
computes snapshot_hash and idempotency_key, so what this producer hashes is what consumers
verify. The *content hash* of a cluster is the snapshot_hash of its snapshot without a
suggested_rule_stub: the content the model is asked about, and the key of its stub lease.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from contracts import EventEnvelope
from contracts.failure_cluster import (
    MAX_RULE_STUB_CHARS,
    FailureClusterDetectedPayload,
    FailureRef,
    failure_cluster_detected_event,
)
from producers.clusters.evidence import EvidenceCandidate
from producers.clusters.model import ClusterFacts
from producers.clusters.severity import SeverityPolicy, derive_severity
from spectral.db.storable import replace_unstorable
from spectral.errors import PermanentError
from spectral.llm.seam import SynthesisRequest, SynthesisResponse

RULE_STUB_FUNCTION: Final = "rule_stub"
MAX_STUB_ANSWER_CHARS: Final = 1_000_000

Snapshot = EventEnvelope[FailureClusterDetectedPayload]


def build_snapshot(
    facts: ClusterFacts,
    evidence: Sequence[EvidenceCandidate],
    severity_policy: SeverityPolicy,
    suggested_rule_stub: str | None = None,
) -> Snapshot:
    return failure_cluster_detected_event(
        cluster_id=facts.cluster_id,
        rule_id=facts.rule_id,
        workspace_id=facts.workspace_id,
        severity=derive_severity(
            facts.failure_count, facts.recent_count, facts.criticality, severity_policy
        ),
        failure_count=facts.failure_count,
        first_observed_at=facts.first_observed_at,
        last_observed_at=facts.last_observed_at,
        evidence_bundle=[
            FailureRef(failure_id=e.failure_id, observed_at=e.observed_at, summary=e.summary)
            for e in evidence
        ],
        suggested_rule_stub=suggested_rule_stub,
    )


def stub_request(facts: ClusterFacts, content: Snapshot) -> SynthesisRequest:
    """What the model is asked for a cluster's content (``content`` has no stub)."""
    payload = content.payload
    summaries = [ref.summary for ref in payload.evidence_bundle]
    prompt = (
        "You help operators triage rule-evaluation failures. Suggest a rule stub (a short rule "
        "skeleton the operator can start from) that would catch or explain this failure "
        f"cluster.\nRule: {payload.rule_id}\nWorkspace: {payload.workspace_id}\n"
        f"Signature: {facts.signature}\nSeverity: {payload.severity}\n"
        f"Failures: {payload.failure_count} between {payload.first_observed_at.isoformat()} "
        f"and {payload.last_observed_at.isoformat()}\nRepresentative failures:\n"
        + "\n".join(f"- {summary}" for summary in summaries)
        + '\nAnswer with a JSON object {"rule_stub": "..."}.'
    )
    return SynthesisRequest(
        function_key=RULE_STUB_FUNCTION,
        prompt=prompt,
        input={
            "rule_id": str(payload.rule_id),
            "workspace_id": str(payload.workspace_id),
            "signature": facts.signature,
            "severity": payload.severity,
            "failure_count": payload.failure_count,
            "evidence_summaries": summaries,
        },
        idempotency_key=f"{RULE_STUB_FUNCTION}:{payload.cluster_id}:{payload.snapshot_hash}",
    )


def parse_rule_stub(response: SynthesisResponse) -> str:
    """The stub text of a ``rule_stub`` answer: a JSON object with a string ``rule_stub``
    (the synthesizer protocol's shape); anything else is a permanent error of the model.

    Any text gives an answer or that error, never another exception (deep nesting included),
    and the stub can be stored and published as it is: U+0000 and lone surrogates become U+FFFD
    (the paid answer itself is kept exactly, on its lease)."""
    if len(response.content) > MAX_STUB_ANSWER_CHARS:
        raise PermanentError("the model's rule_stub answer is too long")
    try:
        data = json.loads(response.content)
    except (ValueError, RecursionError):
        data = None
    stub = data.get("rule_stub") if isinstance(data, dict) else None
    if not isinstance(stub, str) or not stub.strip():
        raise PermanentError("the model's rule_stub answer has no 'rule_stub' string")
    return replace_unstorable(stub.strip()[:MAX_RULE_STUB_CHARS])
