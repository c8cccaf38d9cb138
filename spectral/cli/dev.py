"""`spectral dev up | status | down`: the local Kafka + PostgreSQL stack."""

from __future__ import annotations

import typer

from spectral import devstack
from spectral.cli._common import settings

app = typer.Typer(
    help="Run a real Kafka broker (KRaft) and PostgreSQL locally.", no_args_is_help=True
)


@app.command()
def up() -> None:
    """Start the stack (or reuse what runs) and print shell-evaluable settings."""
    current = settings()
    endpoints = devstack.up(current)
    typer.echo(f"SPECTRAL_KAFKA_BOOTSTRAP={endpoints.kafka_bootstrap}")
    if current.database_url is None:
        typer.echo(f"SPECTRAL_DATABASE_URL='{endpoints.database_url}'")
    else:
        typer.echo("# SPECTRAL_DATABASE_URL is set in the environment (external server)")


@app.command()
def status() -> None:
    """Say what runs where."""
    current = devstack.status(settings())
    typer.echo(f"kafka:    {current.kafka}")
    typer.echo(f"postgres: {current.postgres}")


@app.command()
def down() -> None:
    """Stop the local stack's processes; data stays in the state directory."""
    devstack.down(settings())
    typer.echo("stopped")
