"""The composition root: the `spectral` command wires concrete pieces together.

Each command group lives in its own module and is registered here.
"""

from __future__ import annotations

import sys

import typer

from spectral.cli import (
    clusters,
    consume,
    contracts,
    db,
    demo,
    dev,
    dlq,
    offsets,
    outbox,
    rebuild,
    replay,
    triage,
    work,
)
from spectral.errors import ConfigurationError, SpectralError, TransientError

app = typer.Typer(
    name="spectral",
    help="Typed events on Kafka, materialized exactly once into PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,  # errors are reported as one clear line (see main)
)
app.add_typer(dev.app, name="dev")
app.add_typer(db.app, name="db")
app.add_typer(contracts.app, name="contracts")
app.add_typer(outbox.app, name="outbox")
app.add_typer(clusters.app, name="clusters")
app.command(name="consume")(consume.consume)
app.command(name="demo")(demo.demo)
app.add_typer(triage.app, name="triage")
app.add_typer(work.app, name="work")
app.add_typer(work.threads_app, name="threads")
app.command(name="api")(work.api)
app.command(name="replay")(replay.replay)
app.add_typer(offsets.app, name="offsets")
app.add_typer(dlq.app, name="dlq")
app.add_typer(rebuild.app, name="rebuild")


def main() -> None:
    """Console-script entry point: spectral errors become one line on stderr and an exit code."""
    try:
        app()
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except TransientError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(3)
    except SpectralError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
