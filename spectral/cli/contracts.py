"""`spectral contracts export [--check]` and `spectral contracts hash FILE|-`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from contracts import (
    DEFAULT_REGISTRY,
    DecodeError,
    render_event_schemas,
    schema_violations,
    snapshot_hash_of_json,
)
from spectral import resources

app = typer.Typer(help="Wire contracts: JSON Schemas and the snapshot hash.", no_args_is_help=True)

SOURCE_SCHEMA_DIR = resources.source_event_schemas()
"""schemas/events of the source checkout; None when spectral runs from an installed wheel."""
DEFAULT_SCHEMA_DIR = SOURCE_SCHEMA_DIR or Path(str(resources.event_schemas()))
"""Where --check compares by default: the checkout's files, else the ones the wheel ships."""


@app.command()
def export(
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 when a checked-in schema differs."),
    ] = False,
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Where the schemas live (default: schemas/events of the source checkout).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write schemas/events/<event_type>.v<schema_version>.json for every registered type.

    Refuses (exit 1) a model change that is not additive against the checked-in schemas.
    Writes only into a source checkout or --dir, never into an installed package (exit 2).
    """
    if directory is None:
        if SOURCE_SCHEMA_DIR is None and not check:
            typer.echo(
                "error: spectral runs from an installed package, not a source checkout: pass "
                "--dir DIR to write the schemas somewhere (or --check to compare)",
                err=True,
            )
            raise typer.Exit(2)
        directory = DEFAULT_SCHEMA_DIR
    rendered = render_event_schemas(DEFAULT_REGISTRY)
    checked_in = {path.name: path.read_text("utf-8") for path in sorted(directory.glob("*.json"))}
    violations = schema_violations(rendered, checked_in)
    if violations:
        typer.echo("not additive against the checked-in schemas:", err=True)
        for violation in violations:
            typer.echo(f"  {violation}", err=True)
        typer.echo("add a new event type instead of breaking this one", err=True)
        raise typer.Exit(1)
    stale = sorted(name for name, text in rendered.items() if checked_in.get(name) != text)
    if check:
        for name in stale:
            typer.echo(f"out of date: {directory / name}", err=True)
        if stale:
            typer.echo("run `spectral contracts export` and commit the result", err=True)
            raise typer.Exit(1)
        typer.echo(f"{len(rendered)} schemas up to date")
        return
    directory.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (directory / name).write_text(rendered[name], "utf-8")
        typer.echo(f"wrote {directory / name}")
    typer.echo(f"{len(rendered)} schemas, {len(stale)} written")


@app.command(name="hash")
def hash_command(
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="A JSON object; - reads stdin.")],
) -> None:
    """Print the snapshot_hash of the failure-cluster payload in FILE, and nothing else."""
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        typer.echo(f"cannot read {source}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    try:
        digest = snapshot_hash_of_json(data)
    except DecodeError as exc:
        typer.echo(f"{exc.reason.value}: {exc.detail}", err=True)
        raise typer.Exit(1) from None
    typer.echo(digest)
