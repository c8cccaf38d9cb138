"""The plugin's HTTP route (declared in plugin.py): ``GET /deploys/outcomes``, guarded by the
plugin's own scope. It reads through the operator pool (the role ``spectral_operator``, which
migration 0002 lets read the outcomes)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from deploy_tracker.outcomes import Outcome, outcomes
from deploy_tracker.plugin import DEPLOYS_READ
from spectral.extend import Resources, requires


def router(resources: Resources) -> APIRouter:
    api = APIRouter(tags=["deploys"])
    reader = Depends(requires(resources, DEPLOYS_READ))

    @api.get("/deploys/outcomes", dependencies=[reader])
    async def deploy_outcomes(service: str | None = None) -> list[Outcome]:
        """Deploys per service and outcome (``service``: one service only)."""
        async with resources.operator.acquire() as conn:
            return await outcomes(conn, service)

    return api
