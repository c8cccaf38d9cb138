"""``rule_stub``: the suggested rule stub of a failure cluster, as a work function on the work
ledger (producers/work/domain/functions.py) — run by the work executor like story generation,
under the same lease, attempt counter, retry policy and response journal.

The tick (service.py) asks for a stub by opening work for the cluster's *content* — the snapshot
without a stub, whose hash is the content hash: one thread per (cluster, content hash), identity
``rule_stub/{cluster_id}/{content_hash}``, asked once whatever happens to it. Its item carries
the prompt (built from the snapshot, snapshot.py) and mutates one document,
``rule_stub:{cluster_id}:{content_hash}`` (``{"cluster_id", "content_hash", "rule_stub"}``,
``rule_stub`` null until the answer sets it). The tick reads the stub back from that document.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

from producers.clusters.model import ClusterFacts
from producers.clusters.snapshot import RULE_STUB_FUNCTION, Snapshot, parse_rule_stub, stub_request
from producers.work.domain.documents import InvalidDocumentError, StoredDocument
from producers.work.domain.enqueue import NewDocument, WorkRequest
from producers.work.domain.functions import Ask, Conclusion, ItemRefusedError, Mutation
from producers.work.domain.model import ThreadKind, WorkItem
from producers.work.domain.payloads import message_text
from spectral.errors import PermanentError
from spectral.llm.seam import SynthesisResponse

DOC_TYPE: Final = "rule_stub"
SET_RULE_STUB: Final = "set_rule_stub"
SPACE_TYPE: Final = "workspace"
_MUTATION_NAMESPACE: Final = uuid.UUID("1c2a6f0e-9b1d-4d57-8a5e-5a3b3c0d0057")


def identity(cluster_id: UUID, content_hash: str) -> str:
    """The identity of the stub work of one content of a cluster (asked once)."""
    return f"rule_stub/{cluster_id}/{content_hash}"


def document_id(cluster_id: UUID, content_hash: str) -> str:
    return f"rule_stub:{cluster_id}:{content_hash}"


def lock_scope(cluster_id: UUID) -> str:
    return f"cluster:{cluster_id}"


def work_request(facts: ClusterFacts, content: Snapshot) -> WorkRequest:
    """The stub work of a cluster's content (``content`` has no stub)."""
    request = stub_request(facts, content)
    content_hash = content.payload.snapshot_hash
    document = document_id(facts.cluster_id, content_hash)
    return WorkRequest(
        kind=ThreadKind.RULE_STUB.value,
        identity=identity(facts.cluster_id, content_hash),
        space_type=SPACE_TYPE,
        space_id=str(facts.workspace_id),
        target_ref={
            "document_id": document,
            "cluster_id": str(facts.cluster_id),
            "content_hash": content_hash,
        },
        function_key=RULE_STUB_FUNCTION,
        lock_scope=lock_scope(facts.cluster_id),
        project_id=str(facts.workspace_id),
        input={
            "document_id": document,
            "cluster_id": str(facts.cluster_id),
            "content_hash": content_hash,
            "prompt": request.prompt,
            "model_input": dict(request.input),
        },
        prompt_bytes=len(request.prompt.encode("utf-8")),
        document=NewDocument(
            document,
            DOC_TYPE,
            {"cluster_id": str(facts.cluster_id), "content_hash": content_hash, "rule_stub": None},
        ),
    )


@dataclass(frozen=True)
class SetRuleStub:
    """Set the stub of one cluster content's document."""

    mutation_id: UUID
    document_id: str
    stub: str
    operation: str = SET_RULE_STUB

    @classmethod
    def for_item(cls, work_item_id: UUID, document: str, stub: str) -> SetRuleStub:
        mutation_id = uuid.uuid5(_MUTATION_NAMESPACE, f"{work_item_id}:{SET_RULE_STUB}")
        return cls(mutation_id, document, stub)

    def arguments(self) -> dict[str, Any]:
        return {"rule_stub": self.stub}

    def report(self) -> dict[str, Any]:
        return {"stub_chars": len(self.stub)}


class RuleStub:
    """The work function (see the module docstring)."""

    key: Final = RULE_STUB_FUNCTION
    doc_type: Final = DOC_TYPE

    def ask(self, item: WorkItem, documents: Mapping[str, StoredDocument]) -> Ask:
        prompt = item.input.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise ItemRefusedError("the rule-stub item carries no prompt")
        if str(item.input.get("document_id", "")) not in documents:
            raise ItemRefusedError(f"document {item.input.get('document_id')!r} does not exist")
        model_input = item.input.get("model_input")
        return Ask(prompt, dict(model_input) if isinstance(model_input, Mapping) else {})

    def conclude(self, item: WorkItem, content: str, attempt: int) -> Conclusion:
        try:
            stub = parse_rule_stub(SynthesisResponse(content=content, model=""))
        except PermanentError as exc:
            error = message_text(str(exc), 500)
            report = {"ok": False, "errors": [error], "response_attempt": attempt}
            return Conclusion(report, errors=(error,))
        report = {"ok": True, "errors": [], "response_attempt": attempt, "stub_chars": len(stub)}
        mutation = SetRuleStub.for_item(item.work_item_id, str(item.input["document_id"]), stub)
        return Conclusion(report, mutation)

    def apply(
        self, content: Mapping[str, Any], mutations: Sequence[Mutation]
    ) -> list[dict[str, Any] | InvalidDocumentError]:
        results: list[dict[str, Any] | InvalidDocumentError] = []
        current = dict(content)
        for mutation in mutations:
            if not isinstance(mutation, SetRuleStub):
                results.append(InvalidDocumentError(f"a {DOC_TYPE} only takes {SET_RULE_STUB}"))
                continue
            current = {**current, "rule_stub": mutation.stub}
            results.append(current)
        return results


FUNCTION: Final = RuleStub()
