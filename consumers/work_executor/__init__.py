"""The ``work-executor`` consumer deployment (ADR-035 executed per ADR-0008 and ADR-0023).

``build(settings, database_url, registry)`` is the factory ``spectral consume work-executor``
calls (spectral/consumer/deployments.py). The handler acts as the database role
``spectral_executor``. See handler.py for the event flow and executor.py for the per-item flow
and the unknown-outcome rule.
"""

from __future__ import annotations

import os
import socket
import uuid

from prometheus_client import CollectorRegistry

from consumers.work_executor.executor import CrashPoint, ExecutorConfig
from consumers.work_executor.handler import WorkExecutorHandler
from consumers.work_executor.metrics import ExecutorMetrics
from spectral.errors import ConfigurationError
from spectral.llm.factory import build_synthesizer
from spectral.llm.seam import Synthesizer
from spectral.settings import Settings

CRASH_HOOK_ENV = "SPECTRAL_WORK_CRASH_AT"
"""Test-only fault hook (tests/faults): a CrashPoint at which the executor SIGKILLs itself.
Not a setting: nothing but a fault test should ever set it."""

LEASE_MARGIN_SECONDS = 10.0
"""A lease must outlast the longest call by this much, or a live worker's item is re-claimed."""

__all__ = ["WorkExecutorHandler", "build"]


def build(
    settings: Settings,
    database_url: str,
    registry: CollectorRegistry,
    *,
    synthesizer: Synthesizer | None = None,
    worker_id: str | None = None,
) -> WorkExecutorHandler:
    if settings.work_lease_timeout_seconds < settings.llm_timeout_seconds + LEASE_MARGIN_SECONDS:
        raise ConfigurationError(
            "SPECTRAL_WORK_LEASE_TIMEOUT_SECONDS must exceed SPECTRAL_LLM_TIMEOUT_SECONDS by "
            f"at least {LEASE_MARGIN_SECONDS:g} s, or a call still in flight would be re-claimed"
        )
    crash = os.environ.get(CRASH_HOOK_ENV)
    worker = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    return WorkExecutorHandler(
        settings,
        database_url,
        synthesizer or build_synthesizer(settings),
        ExecutorMetrics(registry),
        ExecutorConfig(
            worker_id=worker,
            lease_timeout_seconds=settings.work_lease_timeout_seconds,
            response_write_patience_seconds=min(60.0, settings.work_lease_timeout_seconds / 2),
            crash_at=CrashPoint(crash) if crash else None,
        ),
    )
