"""The triage inbox's tables for `spectral maintenance` (declared in plugin.py): the audit trail
of operators' changes is kept by design, and measured with the tables that are pruned."""

from __future__ import annotations

from spectral.maintenance.retention import Measured, RetentionTask
from spectral.settings import Settings


def tasks(settings: Settings) -> list[RetentionTask]:  # noqa: ARG001 - the factories' shape
    return [Measured("platform.triage_audit", "the triage audit trail: kept by design")]
