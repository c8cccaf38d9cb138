"""The durable-work feature's settings section (``SPECTRAL_WORK_*``): attempts, retries,
leases, the executors' pool, sweep and claims, priorities, spend metrics and the response
journal. Declared in plugin.py; read with ``WorkSettings.of(settings)``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from spectral.settings import PluginSettings


class WorkSettings(PluginSettings):
    """What the work commands and the work executor read."""

    work_overrun_policy: Literal["raise", "suspend"] = Field(
        default="raise",
        description="What a provider overrun (usage billed above its call's reservation) does "
        "to its model route: 'raise' its reservations to the largest billed/worst-case ratio "
        "it has shown, or 'suspend' it until an operator resumes it (`spectral work routes`).",
    )
    work_overrun_max_ratio: float = Field(
        default=10.0,
        ge=1,
        description="The largest reserve ratio 'raise' goes to: a route billing more than this "
        "many times its worst case is suspended whatever the policy.",
    )
    work_unknown_outcome_policy: Literal["reissue", "release"] = Field(
        default="reissue",
        description="A paid call whose worker died mid-call (its outcome unknown): 'reissue' "
        "sends the same call again under the same idempotency key (a gateway that honours it "
        "answers without billing again; one that ignores it bills twice), 'release' counts the "
        "attempt as used and keeps its reservation until the horizon.",
    )
    work_unknown_outcome_horizon_seconds: float = Field(
        default=86_400.0,
        gt=0,
        description="A reservation whose call's outcome stayed unknown is released once it is "
        "this old (seconds): until then it counts in full against its budget.",
    )
    work_max_attempts: int = Field(
        default=3, ge=1, description="Paid calls per work item, at most."
    )
    work_retry_base_seconds: float = Field(
        default=1.0, gt=0, description="Backoff before retry n: min(base * 2^(n-1), base * 10)."
    )
    work_lease_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="A lease older than this is stale and re-claimed; must exceed llm_timeout.",
    )
    work_pool_size: int = Field(
        default=32,
        ge=1,
        description="Items in flight per executor (their paid calls run concurrently); items "
        "claimed together run in batches of at most half this many, sharing statements.",
    )
    work_sweep_interval_seconds: float = Field(
        default=15.0,
        gt=0,
        description="How often the executor replays the response journals of stopped "
        "executors, recovers stale leases and settles parent threads left open.",
    )
    work_tenant_max_in_flight: int = Field(
        default=0,
        ge=0,
        description="Items of one tenant (org, else project) leased at once across all "
        "executors, at most; 0 = no cap (fair round-robin claims still apply).",
    )
    work_priority_step_seconds: float = Field(
        default=60.0,
        ge=0,
        description="Ageing of priorities: normal items rank 1 step, low ones 3 steps after "
        "high ones enqueued at the same time (producers/work/domain/priority.py).",
    )
    work_claim_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How often an idle executor looks for claimable work no event announced "
        "(a resumed budget, a route's capacity back, a retry come due).",
    )
    work_metric_orgs: list[str] = Field(
        default_factory=list,
        description="Orgs named in the spend metrics' org label; others are counted in one of "
        "16 hash buckets (bounded label sets).",
    )
    work_journal_dir: Path | None = Field(
        default=None,
        description="Local directory of the executor's response journal (paid answers kept, "
        "fsync'd, until the ledger has them); unset = "
        "<state_dir>/work-journal/<host>_<port>_<database>. Must be a local filesystem that "
        "outlives the process (a persistent volume).",
    )
