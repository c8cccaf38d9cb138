"""The executor's database, by role: what it reads (reads.py), the transitions of the items
it leases (transitions.py), and the orchestrations it closes (parents.py)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from consumers.work_executor.overruns import OverrunPolicy
from consumers.work_executor.parents import ParentSettlement
from consumers.work_executor.reads import ExecutorReads
from consumers.work_executor.transitions import Transitions
from producers.work.domain.functions import Functions


@dataclass(frozen=True)
class Store:
    reads: ExecutorReads
    transitions: Transitions
    parents: ParentSettlement

    @classmethod
    def over(
        cls, pool: asyncpg.Pool, functions: Functions, overruns: OverrunPolicy | None = None
    ) -> Store:
        return cls(
            ExecutorReads(pool), Transitions(pool, functions, overruns), ParentSettlement(pool)
        )
