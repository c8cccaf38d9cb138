"""Planning the mutations of a wave, per document: which are refused, the version each makes
and the content the document ends at. Pure: the transitions (transitions.py) read the rows
under their locks and write what the plan says."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

from producers.work.domain.functions import Functions, Mutation
from producers.work.domain.hashing import canonical_text, text_hash


class Applicable(Protocol):
    """What a plan needs of a mutation to apply: its item and lock scope, and the mutation."""

    @property
    def item_id(self) -> UUID: ...

    @property
    def lock_scope(self) -> str: ...

    @property
    def mutation(self) -> Mutation: ...


A = TypeVar("A", bound=Applicable)


@dataclass(frozen=True)
class MutationApplied:
    """What applying one item's mutation did to its document."""

    mutation_id: UUID
    base_version: int
    result_version: int
    already_applied: bool = False


@dataclass
class MutationPlan(Generic[A]):
    applied: dict[UUID, MutationApplied] = field(default_factory=dict)
    refused: dict[UUID, str] = field(default_factory=dict)
    mutations: list[tuple[A, int]] = field(default_factory=list)
    """New mutation rows, each with its base version."""
    versions: list[tuple[str, int, str, str, UUID]] = field(default_factory=list)
    """New document versions: (document, version, content text, hash, mutation id)."""
    updates: list[tuple[str, int, int, str, str]] = field(default_factory=list)
    """Per document: (document, version read, last version, its content text, hash)."""


def plan_mutations(
    live: Sequence[A],
    before: Mapping[UUID, bool],
    documents: Mapping[str, Mapping[str, Any]],
    functions: Functions,
) -> MutationPlan[A]:
    """Per document (rows locked: ``document_id``, ``doc_type``, ``version``, ``content``), its
    items' mutations in lock-scope order, each applied by the work function of the document's
    type to the content the previous one left: its own base and result version. A mutation
    applied before is reported at the version read, not applied again."""
    plan: MutationPlan[A] = MutationPlan()
    by_document: dict[str, list[A]] = defaultdict(list)
    for apply in sorted(live, key=lambda a: (a.lock_scope, a.item_id)):
        by_document[apply.mutation.document_id].append(apply)
    for document_id, group in sorted(by_document.items()):
        row = documents.get(document_id)
        function = functions.for_doc_type(str(row["doc_type"])) if row is not None else None
        if row is None or function is None:
            why = (
                f"document {document_id!r} is gone"
                if row is None
                else f"no work function changes documents of type {row['doc_type']!r}"
            )
            for apply in group:
                plan.refused[apply.item_id] = why
            continue
        read = version = int(row["version"])
        fresh = [a for a in group if not before.get(a.item_id)]
        last: tuple[str, str] | None = None
        results = function.apply(json.loads(row["content"]), [a.mutation for a in fresh])
        for apply, result in zip(fresh, results, strict=True):
            if isinstance(result, Exception):
                plan.refused[apply.item_id] = str(result)
                continue
            text = canonical_text(result)
            last = (text, text_hash(text))
            plan.mutations.append((apply, version))
            version += 1
            plan.versions.append((document_id, version, *last, apply.mutation.mutation_id))
            plan.applied[apply.item_id] = MutationApplied(
                apply.mutation.mutation_id, version - 1, version
            )
        for apply in group:
            if before.get(apply.item_id):  # a mutation id is applied once
                plan.applied[apply.item_id] = MutationApplied(
                    apply.mutation.mutation_id, read, read, already_applied=True
                )
        if last is not None:
            plan.updates.append((document_id, read, version, *last))
    return plan
