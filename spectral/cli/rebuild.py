"""`spectral rebuild rule-candidates`: the triage inbox rebuilt from its topic in one
transaction, operator columns kept (procedure: consumers/rule_candidates/rebuild.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from consumers.rule_candidates.rebuild import rebuild
from spectral.cli._common import fail, run, settings
from spectral.cli.replay import EXIT_INCOMPLETE, print_report, progress_bar
from spectral.consumer.offsets import GroupBusyError
from spectral.devstack import resolve_endpoints

app = typer.Typer(help="Rebuild a projection from its topic.", no_args_is_help=True)


@app.command("rule-candidates")
def rule_candidates(
    *,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            help="The live consumer group, which must have no members (default: the topic "
            "prefix + rule-candidates).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Do it all, then roll back: report the diff.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON summary on stdout.")] = False,
) -> None:
    """Rebuild the triage inbox from its topic, operator columns kept.

    Status, assignee, notes and deleted_at are never written. One transaction, committed only
    if the whole topic was read; refused while the live group has members."""
    current = settings()
    endpoints = resolve_endpoints(current)
    with progress_bar("rebuild rule-candidates") as progress:
        try:
            report = run(
                rebuild(
                    current,
                    kafka_bootstrap=endpoints.kafka_bootstrap,
                    database_url=endpoints.database_url,
                    group=group,
                    dry_run=dry_run,
                    progress=progress,
                )
            )
        except GroupBusyError as exc:
            fail(str(exc), 1)
    print_report(report, as_json=as_json)
    if not report.complete:
        raise typer.Exit(EXIT_INCOMPLETE)
