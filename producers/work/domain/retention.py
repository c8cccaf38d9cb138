"""The durable-work feature's tables for `spectral maintenance` (declared in plugin.py): the
ledger and its companions record what was paid for and received, are kept by design, and are
measured with the tables that are pruned."""

from __future__ import annotations

from spectral.maintenance.retention import Measured, RetentionTask
from spectral.settings import Settings

KEPT: tuple[str, ...] = ("work.ledger_entries", "work.work_items", "work.spend")


def tasks(settings: Settings) -> list[RetentionTask]:  # noqa: ARG001 - the factories' shape
    return [Measured(table, "the work ledger: kept by design") for table in KEPT]
