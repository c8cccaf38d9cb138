"""The ``work-executor`` deployment's factory: ``build(settings, database_url, registry)`` is
what ``spectral consume work-executor`` calls (declared in plugin.py). The handler acts as the
database role ``spectral_executor``.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry

from consumers.work_executor.executor import ExecutorConfig
from consumers.work_executor.faults import CrashPoint, crashing_store, crashing_synthesizer
from consumers.work_executor.handler import WorkExecutorHandler
from consumers.work_executor.metrics import ExecutorMetrics, SpendLabels
from consumers.work_executor.outcomes import UnknownOutcomePolicy
from consumers.work_executor.overruns import OverrunPolicy
from consumers.work_executor.schedule import Resolve
from consumers.work_executor.store import Store
from producers.work.domain.settings import WorkSettings
from spectral.errors import ConfigurationError
from spectral.llm.factory import build_synthesizer
from spectral.llm.limits import ProviderLimits
from spectral.llm.router import ModelRouter, RouteError
from spectral.llm.seam import Synthesizer
from spectral.llm.settings import LlmSettings
from spectral.settings import PluginSettings, Settings, socket_directory, url_port


class ExecutorFaultHooks(PluginSettings):
    """Test-only fault hooks (tests/faults), in a section no plugin declares, so no reference
    lists them: nothing but a fault test should ever set them."""

    work_crash_at: CrashPoint | None = None
    """``SPECTRAL_WORK_CRASH_AT``: where the executor SIGKILLs itself."""


LEASE_MARGIN_SECONDS = 10.0
"""A lease must outlast the longest call by this much, or a live worker's item is re-claimed."""

CALL_TIMEOUT_MARGIN_SECONDS = 5.0
"""The executor abandons a call this long after the synthesizer's own timeout should have."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def build(
    settings: Settings,
    database_url: str,
    registry: CollectorRegistry,
    *,
    synthesizer: Synthesizer | None = None,
    worker_id: str | None = None,
) -> WorkExecutorHandler:
    work, llm = WorkSettings.of(settings), LlmSettings.of(settings)
    if work.work_lease_timeout_seconds < llm.llm_timeout_seconds + LEASE_MARGIN_SECONDS:
        raise ConfigurationError(
            "SPECTRAL_WORK_LEASE_TIMEOUT_SECONDS must exceed SPECTRAL_LLM_TIMEOUT_SECONDS by "
            f"at least {LEASE_MARGIN_SECONDS:g} s, or a call still in flight would be re-claimed"
        )
    worker = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    router = ModelRouter.from_settings(settings)
    limits = ProviderLimits.from_settings(settings)
    labels = SpendLabels({*router.routes.values(), *limits.models}, work.work_metric_orgs)
    model = synthesizer or build_synthesizer(settings)
    crash_at = ExecutorFaultHooks.of(settings).work_crash_at
    overruns = OverrunPolicy.from_settings(settings)
    return WorkExecutorHandler(
        settings,
        database_url,
        model if crash_at is None else crashing_synthesizer(crash_at, model),
        ExecutorMetrics(registry, labels),
        ExecutorConfig(
            worker_id=worker,
            lease_timeout_seconds=work.work_lease_timeout_seconds,
            journal_dir=journal_directory(settings, database_url),
            call_timeout_seconds=llm.llm_timeout_seconds + CALL_TIMEOUT_MARGIN_SECONDS,
            limits=limits,
            unknown_outcomes=UnknownOutcomePolicy.from_settings(settings),
        ),
        resolve=route_resolver(router),
        store=partial(Store.over, overruns=overruns)
        if crash_at is None
        else partial(crashing_store, crash_at, overruns=overruns),
    )


def route_resolver(router: ModelRouter) -> Resolve:
    """(function_key, org_id) -> the model its call goes to, None when no route resolves (the
    call itself then fails, permanently, with the router's explanation)."""

    def resolve(function_key: str, org_id: str | None) -> str | None:
        try:
            return router.resolve(function_key, org_id).model
        except RouteError:
            return None

    return resolve


def journal_directory(settings: Settings, database_url: str) -> Path:
    """``SPECTRAL_WORK_JOURNAL_DIR``, or ``<state_dir>/work-journal/<host>_<port>_<database>``
    (the host of a Unix-domain socket URL is its directory): executors of one database share a
    directory (each adopts the files of those that stopped), executors of different databases
    never see each other's answers. The name follows the URL's spelling: executors that must
    adopt each other's files use one URL (or one SPECTRAL_WORK_JOURNAL_DIR)."""
    configured = WorkSettings.of(settings).work_journal_dir
    if configured is not None:
        return configured
    parts = urlsplit(database_url)
    host = socket_directory(database_url) or parts.hostname or "local"
    name = f"{host}_{url_port(database_url) or 5432}_{parts.path.strip('/') or 'db'}"
    return settings.state_dir / "work-journal" / _UNSAFE.sub("_", name)
