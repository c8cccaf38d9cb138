"""deploy-tracker's declaration: everything it adds to spectral, each by a lazy reference
relative to this package (spectral imports a part only when it needs it; this module imports
nothing heavy, so ``spectral --help`` stays fast)."""

from __future__ import annotations

from typing import Final

from spectral.extend import Command, Deployment, Plugin, Router, Scope, Tools

DEPLOYS_READ: Final = Scope("deploys:read", "read deploy outcomes per service")

PLUGIN: Final = Plugin(
    events=(".events:SPECS",),
    deployments=(Deployment("deploy-tracker", ".projection:build"),),
    migrations=".migrations",
    commands=(
        Command("deploys", "Deploy outcomes per service (the deploy-tracker plugin).", ".cli:app"),
    ),
    routers=(
        Router(
            ".api:router",
            description="**Deploys** (the deploy-tracker plugin). `GET /deploys/outcomes`: "
            "deploys per service and outcome; needs `deploys:read`.",
        ),
    ),
    tools=(Tools(".tools:register", instructions="Deploy outcomes per service: deploy_outcomes."),),
    scopes=(DEPLOYS_READ,),
)
