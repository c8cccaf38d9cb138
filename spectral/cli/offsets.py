"""`spectral offsets reset NAME`: move a live consumer group's committed offsets (spectral/engine/
offsets.py); refused while the group has active members."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from spectral.cli._common import (
    DEPLOYMENT_HELP,
    deployment_name,
    deprecated_consumer_option,
    fail,
    offsets_option,
    run,
    settings,
    timestamp_option,
)
from spectral.cli.deployments import reads_of

if TYPE_CHECKING:
    from spectral.replay.offsets import ResetReport

app = typer.Typer(help="Consumer group offsets.", no_args_is_help=True)

EXIT_BUSY = 1


@app.command()
def reset(
    name: Annotated[str | None, typer.Argument(help=DEPLOYMENT_HELP, show_default=False)] = None,
    *,
    consumer: Annotated[str | None, deprecated_consumer_option()] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group", help="The live group (default: the topic prefix + the deployment name)."
        ),
    ] = None,
    to_earliest: Annotated[
        bool, typer.Option("--to-earliest", help="The first offset still in each partition.")
    ] = False,
    to_latest: Annotated[
        bool, typer.Option("--to-latest", help="The end offsets: skip everything so far.")
    ] = False,
    to_timestamp: Annotated[
        str | None,
        timestamp_option("--to-timestamp", "The first record at or after this time."),
    ] = None,
    to_offset: Annotated[
        str | None,
        offsets_option("--to-offset", "These offsets; only the partitions named are reset."),
    ] = None,
    beyond_horizon: Annotated[
        bool,
        typer.Option(
            "--beyond-horizon",
            help="Reset even when the records read again reach behind the dedup horizon "
            "(their keys may have been forgotten: they could apply twice).",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the change, commit nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Set a stopped consumer group's committed offsets.

    Refused (exit 1) while the group has active members, and when the events read again reach
    behind the dedup horizon (unless --beyond-horizon). Re-read events are deduplicated;
    skipped events are never applied."""
    # The Kafka client and the database driver load when the command runs, not for --help.
    from spectral.replay.range import start_of  # noqa: PLC0415

    given = sum((to_earliest, to_latest, to_timestamp is not None, to_offset is not None))
    if given != 1:
        raise typer.BadParameter(
            "give exactly one of --to-earliest, --to-latest, --to-timestamp, --to-offset"
        )
    try:
        target = start_of(
            from_beginning=to_earliest,
            from_offset=to_offset,
            from_timestamp=to_timestamp,
            latest=to_latest,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    deployment = deployment_name(name, consumer, "offsets reset")
    current = settings()
    from spectral.devstack import resolve_endpoints  # noqa: PLC0415
    from spectral.kafka.topics import group_for  # noqa: PLC0415
    from spectral.replay.guard import BeyondHorizonError  # noqa: PLC0415
    from spectral.replay.offsets import GroupBusyError, reset_offsets  # noqa: PLC0415

    endpoints = resolve_endpoints(current)

    async def go() -> ResetReport:
        reads = await reads_of(deployment, current, endpoints.database_url)
        return await reset_offsets(
            current,
            endpoints.kafka_bootstrap,
            event_types=reads.event_types,
            group=group or group_for(deployment, current.topic_prefix),
            target=target,
            database_url=endpoints.database_url,
            role=reads.database_role,
            beyond_horizon=beyond_horizon,
            dry_run=dry_run,
        )

    try:
        report = run(go())
    except (GroupBusyError, BeyondHorizonError) as exc:
        fail(str(exc), EXIT_BUSY)
    except ValueError as exc:
        fail(str(exc), 2)
    _print(report, as_json=as_json)


def _print(report: ResetReport, *, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    from rich.console import Console  # noqa: PLC0415 - printing only
    from rich.table import Table  # noqa: PLC0415

    verb = "reset" if report.committed else "would reset (dry run)"
    table = Table(title=f"group {report.group} ({report.state}): {verb}", title_justify="left")
    for column in ("topic", "partition", "before", "after"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    for c in report.changes:
        table.add_row(
            c.topic, str(c.partition), "-" if c.before is None else str(c.before), str(c.after)
        )
    Console().print(table)
    if report.beyond_horizon is not None:
        typer.echo(f"warning: {report.beyond_horizon}", err=True)
