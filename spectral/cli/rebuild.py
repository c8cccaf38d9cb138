"""`spectral rebuild NAME`: a deployment's projection rebuilt from its topics in one
transaction (procedure: spectral/replay/rebuild.py; rule-candidates keeps its operator
columns: consumers/rule_candidates/rebuild.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from spectral.cli._common import DEPLOYMENT_HELP, settings
from spectral.cli.deployments import handler_factory
from spectral.cli.replay import run_and_report


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
    # The Kafka client, the engine and the database driver load once the settings are good.
    from spectral.devstack import resolve_endpoints  # noqa: PLC0415
    from spectral.replay.offsets import GroupBusyError  # noqa: PLC0415
    from spectral.replay.rebuild import rebuild as run_rebuild  # noqa: PLC0415

    endpoints = resolve_endpoints(current)
    make_handler = handler_factory(name, current)
    run_and_report(
        f"rebuild {name}",
        lambda progress: run_rebuild(
            make_handler,
            current,
            kafka_bootstrap=endpoints.kafka_bootstrap,
            database_url=endpoints.database_url,
            group=group,
            dry_run=dry_run,
            progress=progress,
        ),
        refused=GroupBusyError,
        code=1,
        as_json=as_json,
    )
