"""The seam between the work ledger and what a paid call is *for*: a ``WorkFunction``.

The executor (consumers/work_executor) owns the lifecycle every paid call shares — lease,
attempt, the call, the recorded answer, retry or dead letter, the mutation under its target
lock, the parents — and knows nothing of any one function. A function knows nothing of
leases or attempts; it answers three questions, purely:

* ``ask(item, documents)``: the prompt (and the structured input beside it) of the item's next
  call, built from its input and the documents it names; ``ItemRefusedError`` when the item
  cannot be run as asked (no call is made, the item is dead-lettered);
* ``conclude(item, content, attempt)``: what a paid answer means — a ``Conclusion`` with the
  ``parse_report`` to record and either a ``Mutation`` of the item's document or the errors
  that refuse it (the item is dead-lettered, the answer stays in the ledger);
* ``apply(content, mutations)``: the document's content after each of its mutations in turn
  (the executor applies them under the target lock, one document version per mutation).

Two functions ship: story generation (``story_generate``, producers/work/domain/story/) and the
suggested rule stub of a failure cluster (``rule_stub``, producers/clusters/stub.py). Functions
are found through the entry-point group ``spectral.work_functions`` (``key = "module:FUNCTION"``),
so the executor never imports a feature that runs on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from typing import Any, Final, Protocol, runtime_checkable
from uuid import UUID

from producers.work.domain.documents import InvalidDocumentError, StoredDocument
from producers.work.domain.model import WorkItem
from spectral.errors import ConfigurationError, PermanentError

GROUP: Final = "spectral.work_functions"


class ItemRefusedError(PermanentError):
    """The item cannot be run as asked (a document or a target it names is missing or
    invalid): no paid call is made for it."""


@dataclass(frozen=True)
class Ask:
    """The paid call of an attempt, as a function sees it: the prompt and the input beside it
    (context for routing, the ledger and the stub synthesizer; not sent to the model)."""

    prompt: str
    input: Mapping[str, Any]


@runtime_checkable
class Mutation(Protocol):
    """An explicit, idempotent change of one document (ADR-035 §5.4): its id is derived from its
    work item, so a retried application is recognised and skipped."""

    @property
    def mutation_id(self) -> UUID: ...

    @property
    def document_id(self) -> str: ...

    @property
    def operation(self) -> str: ...

    def arguments(self) -> dict[str, Any]:
        """What the ``work.mutations`` row records of it."""
        ...

    def report(self) -> dict[str, Any]:
        """The function's own fields of its ``mutation_report`` entry."""
        ...


@dataclass(frozen=True)
class Conclusion:
    """What an answer means: a mutation to apply, or the errors that refuse it."""

    parse_report: Mapping[str, Any]
    mutation: Mutation | None = None
    errors: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.mutation is not None


class WorkFunction(Protocol):
    """One kind of paid work on the ledger (see the module docstring)."""

    @property
    def key(self) -> str:
        """The ``function_key`` of its items (the router resolves it to a model)."""
        ...

    @property
    def doc_type(self) -> str:
        """The type of the documents its mutations change."""
        ...

    def ask(self, item: WorkItem, documents: Mapping[str, StoredDocument]) -> Ask: ...

    def conclude(self, item: WorkItem, content: str, attempt: int) -> Conclusion: ...

    def apply(
        self, content: Mapping[str, Any], mutations: Sequence[Mutation]
    ) -> list[dict[str, Any] | InvalidDocumentError]: ...


class Functions:
    """The installed work functions, by function key and by document type."""

    def __init__(self, functions: Iterable[WorkFunction]) -> None:
        self._by_key: dict[str, WorkFunction] = {}
        self._by_doc_type: dict[str, WorkFunction] = {}
        for function in functions:
            for index, name in (
                (self._by_key, function.key),
                (self._by_doc_type, function.doc_type),
            ):
                if name in index:
                    raise ConfigurationError(f"two work functions claim {name!r}")
                index[name] = function

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(self._by_key)

    def for_key(self, function_key: str) -> WorkFunction | None:
        return self._by_key.get(function_key)

    def for_doc_type(self, doc_type: str) -> WorkFunction | None:
        return self._by_doc_type.get(doc_type)


@cache
def installed_functions() -> Functions:
    """Every work function of the installed distributions (group ``spectral.work_functions``)."""
    loaded: list[WorkFunction] = []
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        function = point.load()
        if function.key != point.name:
            raise ConfigurationError(
                f"work function entry point {point.name!r} names a function of key {function.key!r}"
            )
        loaded.append(function)
    return Functions(loaded)
