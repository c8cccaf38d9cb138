"""``spectral deploys``: the plugin's own command (declared in plugin.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from deploy_tracker.outcomes import Outcome, outcomes
from spectral.extend import connect, load_settings, resolve_database_url

app = typer.Typer(
    help="Deploy outcomes per service (the deploy-tracker plugin).", no_args_is_help=True
)


async def _read(service: str | None) -> list[Outcome]:
    conn = await connect(resolve_database_url(load_settings()))
    try:
        return await outcomes(conn, service)
    finally:
        await conn.close()


@app.command("outcomes")
def show_outcomes(
    service: Annotated[str | None, typer.Option(help="One service only.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Deploys per service and outcome."""
    found = asyncio.run(_read(service))
    if as_json:
        typer.echo(json.dumps([o.model_dump(mode="json") for o in found], indent=2))
        return
    for o in found:
        typer.echo(f"{o.service:<24} {o.outcome:<12} {o.deploys:>6}  last {o.last_at.isoformat()}")
