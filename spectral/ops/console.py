"""Operations pages of the web console: each deployment's lag and progress per partition, its
dead letters by reason, and redrive — a dry run first, whose result page offers the real
redrive (to a token holding ``ops:redrive``) for exactly the same topic and reason."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, cast

import asyncpg
from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse

from spectral.api.auth import check_csrf, console_requires, missing_scope
from spectral.api.problems import ProblemError
from spectral.api.resources import Resources
from spectral.auth.scopes import Scope
from spectral.auth.tokens import Principal
from spectral.console.site import PREFIX, Console
from spectral.dlq.records import Topics, read_dead_letters
from spectral.dlq.redrive import redrive
from spectral.dlq.repository import RedriveRepository
from spectral.ops.api import Deployment, summarize
from spectral.ops.lag import group_progress


def router(console: Console, resources: Resources, deployments: Sequence[Deployment]) -> APIRouter:
    pages = APIRouter(prefix=PREFIX, include_in_schema=False)
    reader = Depends(console_requires(resources, Scope.OPS_READ))

    @pages.get("/consumers")
    async def console_consumers(*, request: Request, principal: Principal = reader) -> HTMLResponse:
        groups = []
        letters = []
        for d in deployments:
            groups.append(
                await group_progress(
                    resources.settings,
                    resources.kafka_bootstrap,
                    deployment=d.name,
                    group=d.group,
                    topics=d.topics,
                )
            )
            for topic in d.topics:
                topics = Topics.of(topic)
                records = await read_dead_letters(
                    resources.settings, resources.kafka_bootstrap, topics.dlq
                )
                async with resources.operator.acquire() as conn:
                    done = await RedriveRepository(cast("asyncpg.Connection", conn)).redriven(
                        topics.dlq
                    )
                letters.append(summarize(d.name, topics, records, done))
        return console.page(
            request,
            "consumers.html",
            principal,
            section="consumers",
            groups=groups,
            letters=letters,
            can_redrive=principal.allows(Scope.OPS_REDRIVE),
        )

    @pages.post("/dead-letters/redrive")
    async def console_redrive(
        *,
        request: Request,
        principal: Principal = reader,
        topic: Annotated[str, Form(max_length=300)],
        csrf: Annotated[str, Form(max_length=200)] = "",
        reason: Annotated[str, Form(max_length=200)] = "",
        confirm: Annotated[str, Form(max_length=5)] = "",
    ) -> HTMLResponse:
        check_csrf(request, csrf)
        dry_run = confirm != "1"
        if not dry_run and not principal.allows(Scope.OPS_REDRIVE):
            raise missing_scope(principal, Scope.OPS_REDRIVE)
        topics = Topics.of(topic)
        if not any(topics.source in d.topics for d in deployments):
            raise ProblemError(404, "not a topic of any consumer deployment", slug="not-found")
        async with resources.operator.acquire() as conn:
            report = await redrive(
                resources.settings,
                resources.kafka_bootstrap,
                cast("asyncpg.Connection", conn),
                topic=topics.source,
                reason=reason or None,
                dry_run=dry_run,
            )
        return console.page(
            request,
            "redrive.html",
            principal,
            section="consumers",
            report=report,
            reason=reason,
            can_redrive=principal.allows(Scope.OPS_REDRIVE),
        )

    return pages
