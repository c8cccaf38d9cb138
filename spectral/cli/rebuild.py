"""`spectral rebuild NAME`: a deployment's projection rebuilt from its topics in one
transaction (procedure: spectral/replay/rebuild.py; rule-candidates keeps its operator
columns: consumers/rule_candidates/rebuild.py)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from prometheus_client import CollectorRegistry

from spectral.cli._common import DEPLOYMENT_HELP, fail, run, settings
from spectral.cli.deployments import factory
from spectral.cli.replay import EXIT_INCOMPLETE, print_report, progress_bar
from spectral.devstack import resolve_endpoints
from spectral.engine.handler import Handler
from spectral.replay.offsets import GroupBusyError
from spectral.replay.rebuild import rebuild as run_rebuild


def rebuild(
    name: Annotated[str, typer.Argument(help=DEPLOYMENT_HELP, show_default=False)],
    *,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            help="The live consumer group, which must have no members (default: the topic "
            "prefix + the deployment name).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Do it all, then roll back: report the diff.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON summary on stdout.")] = False,
) -> None:
    """Rebuild a deployment's projection from its topics (rule-candidates: the triage inbox,
    operator columns kept).

    One transaction, committed only if every topic was read to its end; refused while the live
    group has members, and for a deployment whose handler gives no rebuild."""
    current = settings()
    endpoints = resolve_endpoints(current)
    build = factory(name)

    def make_handler(database_url: str) -> Handler[Any]:
        return build(current, database_url, CollectorRegistry())

    with progress_bar(f"rebuild {name}") as progress:
        try:
            report = run(
                run_rebuild(
                    make_handler,
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
