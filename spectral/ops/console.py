"""Operations pages of the web console: each deployment's lag and progress per partition, its
dead letters by reason, and redrive — a dry run first, whose result page offers the real
redrive (to a token holding ``ops:redrive``) for exactly the same topic and reason."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse

from spectral.api.auth import check_csrf, console_requires, missing_scope
from spectral.api.problems import not_found
from spectral.api.resources import Resources
from spectral.auth.scopes import OPS_READ, OPS_REDRIVE
from spectral.auth.tokens import Principal
from spectral.console.site import PREFIX, Console
from spectral.declaration import NavEntry
from spectral.ops.views import (
    Deployment,
    UnknownTopicError,
    dead_letter_topics,
    find_topics,
    progress,
    redrive_topic,
)

NAV: Final = NavEntry("consumers", "Consumers", "/consumers", order=20)
"""The operations page's place in the console's navigation."""


def router(console: Console, resources: Resources, deployments: Sequence[Deployment]) -> APIRouter:
    pages = APIRouter(prefix=PREFIX, include_in_schema=False)
    reader = Depends(console_requires(resources, OPS_READ))
    anyone = Depends(console_requires(resources, None))

    @pages.get("/consumers")
    async def console_consumers(*, request: Request, principal: Principal = reader) -> HTMLResponse:
        return console.page(
            request,
            "consumers.html",
            principal,
            section="consumers",
            groups=await progress(resources, deployments),
            letters=await dead_letter_topics(resources, deployments),
            can_redrive=principal.allows(OPS_REDRIVE),
        )

    @pages.post("/dead-letters/redrive")
    async def console_redrive(
        *,
        request: Request,
        principal: Principal = anyone,
        topic: Annotated[str, Form(max_length=300)],
        csrf: Annotated[str, Form(max_length=200)] = "",
        reason: Annotated[str, Form(max_length=200)] = "",
        confirm: Annotated[str, Form(max_length=5)] = "",
    ) -> HTMLResponse:
        check_csrf(request, csrf)
        dry_run = confirm != "1"
        needed = OPS_READ if dry_run else OPS_REDRIVE
        if not principal.allows(needed):
            raise missing_scope(principal, needed)
        try:
            topics = find_topics(deployments, topic)
        except UnknownTopicError as exc:
            raise not_found(str(exc)) from None
        report = await redrive_topic(resources, topics, reason=reason or None, dry_run=dry_run)
        return console.page(
            request,
            "redrive.html",
            principal,
            section="consumers",
            report=report,
            reason=reason,
            can_redrive=principal.allows(OPS_REDRIVE),
        )

    return pages
