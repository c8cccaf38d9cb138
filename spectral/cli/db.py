"""`spectral db migrate`."""

from __future__ import annotations

import typer

from spectral.cli._common import run, settings

app = typer.Typer(help="Database schema.", no_args_is_help=True)


@app.command()
def migrate() -> None:
    """Apply pending migrations: spectral's (schemas/sql), then each installed plugin's own
    track (once each, in order)."""
    current = settings()
    from spectral.db.migrate import migrate as apply_migrations  # noqa: PLC0415 - after settings
    from spectral.devstack import resolve_database_url  # noqa: PLC0415

    url = resolve_database_url(current)
    report = run(apply_migrations(url))
    for name in report.applied:
        typer.echo(f"applied {name}")
    typer.echo(f"{len(report.applied)} applied, {len(report.already)} already applied")
    for track in report.plugins:
        for name in track.applied:
            typer.echo(f"applied {track.plugin}/{name}")
        typer.echo(
            f"plugin {track.plugin}: {len(track.applied)} applied, "
            f"{len(track.already)} already applied"
        )
