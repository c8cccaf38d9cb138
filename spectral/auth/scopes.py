"""The scopes a token can carry and what each allows (pure: no I/O).

    work:read      observe threads, their ledger history and documents
    work:submit    submit work commands and put documents (implies work:read)
    work:cancel    cancel threads and generate-all trees (implies work:read)
    work:budget    set and remove the spend budgets of orgs (implies work:read)
    triage:read    list failure clusters, read one with its evidence and audit trail
    triage:write   triage a cluster: status, assignee, notes, soft delete (implies triage:read)
    ops:read       consumer lag and progress, dead letters, redrive and replay dry runs
    ops:redrive    really redrive dead letters (implies ops:read)

The vocabulary is also a CHECK constraint of ``core.api_tokens.scopes``; a test keeps both equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Final


class Scope(StrEnum):
    WORK_READ = "work:read"
    WORK_SUBMIT = "work:submit"
    WORK_CANCEL = "work:cancel"
    WORK_BUDGET = "work:budget"
    TRIAGE_READ = "triage:read"
    TRIAGE_WRITE = "triage:write"
    OPS_READ = "ops:read"
    OPS_REDRIVE = "ops:redrive"


IMPLIES: Final[dict[Scope, frozenset[Scope]]] = {
    Scope.WORK_SUBMIT: frozenset({Scope.WORK_READ}),
    Scope.WORK_CANCEL: frozenset({Scope.WORK_READ}),
    Scope.WORK_BUDGET: frozenset({Scope.WORK_READ}),
    Scope.TRIAGE_WRITE: frozenset({Scope.TRIAGE_READ}),
    Scope.OPS_REDRIVE: frozenset({Scope.OPS_READ}),
}


def effective(granted: Iterable[Scope]) -> frozenset[Scope]:
    """The scopes granted plus those they imply."""
    out = set(granted)
    for scope in list(out):
        out |= IMPLIES.get(scope, frozenset())
    return frozenset(out)


def parse_scopes(values: Iterable[str]) -> tuple[Scope, ...]:
    """Scopes from their names (sorted, without duplicates); ValueError naming the valid ones."""
    found: set[Scope] = set()
    for value in values:
        try:
            found.add(Scope(value.strip()))
        except ValueError:
            names = ", ".join(s.value for s in Scope)
            raise ValueError(f"unknown scope {value!r}; expected one of: {names}") from None
    if not found:
        raise ValueError("a token needs at least one scope")
    return tuple(sorted(found))
