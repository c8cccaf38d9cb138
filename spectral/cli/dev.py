"""`spectral dev up | status | down`: the local Kafka + PostgreSQL stack."""

from __future__ import annotations

import shlex

import typer

from spectral import devstack
from spectral.cli._common import settings
from spectral.devstack.kafka_cluster import MAX_BROKERS

app = typer.Typer(
    help="Run a real Kafka broker (KRaft) and PostgreSQL locally.", no_args_is_help=True
)


@app.command()
def up(
    brokers: int | None = typer.Option(
        None,
        "--brokers",
        min=1,
        max=MAX_BROKERS,
        help="Kafka brokers of a new stack: 1 (the default) or a KRaft cluster, e.g. 3 "
        "(replication 3, min.insync.replicas 2). A stack keeps the size it was started with.",
    ),
) -> None:
    """Start the stack (or reuse what runs) and print its settings as shell exports:
    eval "$(spectral dev up)"."""
    current = settings()
    own_kafka, own_postgres = devstack.owns_kafka(current), devstack.owns_postgres(current)
    if brokers is not None and not own_kafka:
        typer.echo(
            "# SPECTRAL_KAFKA_BOOTSTRAP is set: that cluster is used and --brokers is ignored",
            err=True,
        )
    endpoints = devstack.up(current, brokers=brokers)
    if own_kafka:
        typer.echo(f"export SPECTRAL_KAFKA_BOOTSTRAP={shlex.quote(endpoints.kafka_bootstrap)}")
    else:
        typer.echo("# SPECTRAL_KAFKA_BOOTSTRAP is set in the environment (external cluster)")
    if own_postgres:
        typer.echo(f"export SPECTRAL_DATABASE_URL={shlex.quote(endpoints.database_url)}")
    else:
        typer.echo("# SPECTRAL_DATABASE_URL is set in the environment (external server)")
    if own_kafka or own_postgres:
        typer.echo(f"export SPECTRAL_STATE_DIR={shlex.quote(str(devstack.state_dir(current)))}")


@app.command()
def status() -> None:
    """Say what runs where."""
    current = settings()
    report = devstack.status(current)
    typer.echo(f"kafka:    {report.kafka}")
    typer.echo(f"postgres: {report.postgres}")
    typer.echo(f"state:    {devstack.state_dir(current)}")
    for orphan in report.orphans:
        typer.echo(f"orphaned: {orphan}; `spectral dev down --wipe` removes it")


@app.command()
def down(
    wipe: bool = typer.Option(
        default=False,
        help="Also delete everything the stack created: Kafka's and PostgreSQL's data (as root "
        "under /var/lib/spectral) and the state directory, and the PostgreSQL clusters there "
        "of stacks whose checkout is gone.",
    ),
) -> None:
    """Stop the local stack's processes; their data is kept unless --wipe."""
    removed = devstack.down(settings(), wipe=wipe)
    for root in removed:
        typer.echo(f"removed the orphaned cluster {root}")
    typer.echo("stopped and wiped" if wipe else "stopped")
