"""The plugin's event type: ``deploys.deploy.finished`` (its own namespace, never spectral's)."""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from spectral.extend import EventSpec


class DeployFinished(BaseModel):
    """A deploy of one service ended."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    deploy_id: str = Field(min_length=1, max_length=200)
    service: str = Field(max_length=200)
    outcome: Literal["succeeded", "failed", "rolled_back"]
    finished_at: datetime


DEPLOY_FINISHED: Final = EventSpec(
    event_type="deploys.deploy.finished",
    schema_version=1,
    payload_model=DeployFinished,
    idempotency_key=lambda p: p.deploy_id,  # one event per deploy: a re-send is a duplicate
    record_key=lambda p: p.service,  # one service's deploys stay in order on one partition
    default_source="deploy-pipeline",
    default_target="deploy-tracker",
)

SPECS: Final = (DEPLOY_FINISHED,)
"""What the ``spectral.events`` entry point registers."""
