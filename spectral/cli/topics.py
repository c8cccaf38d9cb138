"""`spectral topics plan | apply`: create spectral's topics deliberately, with their settings."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from spectral.cli._common import run, settings
from spectral.plugins import installed_registry

if TYPE_CHECKING:
    from spectral.kafka.topology import Change, ExistingTopic, TopicPolicy, TopicSpec
    from spectral.settings import Settings

app = typer.Typer(help="Declare spectral's topics: plan, then apply.", no_args_is_help=True)

AllowShrink = Annotated[
    bool,
    typer.Option(
        "--allow-shrink",
        help="Also apply lower retention, size limits or min.insync.replicas than the cluster has.",
    ),
]
AllowRepartition = Annotated[
    bool,
    typer.Option(
        "--allow-repartition",
        help="Also add partitions (keys move: per-key order breaks across the change).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")]


def _policy(current: Settings) -> TopicPolicy:
    from spectral.kafka.topology import TopicPolicy  # noqa: PLC0415 - see _plan

    return TopicPolicy(
        partitions=current.topic_partitions,
        replication_factor=current.topic_replication_factor,
        retention_ms=current.topic_retention_ms,
        dlq_retention_ms=current.dlq_retention_ms,
    )


async def _plan(
    current: Settings, bootstrap: str, *, allow_shrink: bool, allow_repartition: bool
) -> tuple[list[TopicSpec], list[Change], dict[str, ExistingTopic]]:
    # The contracts and the Kafka client load when a command runs, not for --help.
    from spectral.kafka import topic_admin  # noqa: PLC0415
    from spectral.kafka.topology import declared_topics, plan  # noqa: PLC0415

    policy = _policy(current)
    event_types = installed_registry().event_types()  # spectral's and the installed plugins'
    names = [spec.name for spec in declared_topics(event_types, "", policy, 1)]
    prefixed = [f"{current.topic_prefix}{name}" for name in names]
    brokers, existing = await topic_admin.describe(current, bootstrap, prefixed)
    declared = declared_topics(event_types, current.topic_prefix, policy, brokers, existing)
    changes = plan(
        declared, existing, allow_shrink=allow_shrink, allow_repartition=allow_repartition
    )
    return declared, changes, existing


def _print(declared: list[TopicSpec], changes: list[Change], *, as_json: bool) -> None:
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "topics": [asdict(spec) for spec in declared],
                    "changes": [
                        {**asdict(c), "action": c.action.value, "applies": c.applies}
                        for c in changes
                    ],
                },
                indent=2,
                sort_keys=True,
            )
        )
        return
    if not changes:
        typer.echo(f"{len(declared)} topics, all as declared")
        return
    for change in changes:
        typer.echo(change.describe())
    applying = sum(c.applies for c in changes)
    typer.echo(
        f"{len(declared)} topics: {applying} changes to apply, {len(changes) - applying} not"
    )


@app.command(name="plan")
def plan_command(
    allow_shrink: AllowShrink = False,
    allow_repartition: AllowRepartition = False,
    as_json: AsJson = False,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 when `topics apply` would change something.")
    ] = False,
) -> None:
    """Show what `topics apply` would change; reads only (creates nothing)."""
    current = settings()
    from spectral.devstack import resolve_kafka_bootstrap  # noqa: PLC0415 - after settings

    bootstrap = resolve_kafka_bootstrap(current)
    declared, changes, _ = run(
        _plan(current, bootstrap, allow_shrink=allow_shrink, allow_repartition=allow_repartition)
    )
    _print(declared, changes, as_json=as_json)
    if check and any(c.applies for c in changes):
        raise typer.Exit(1)


@app.command()
def apply(
    allow_shrink: AllowShrink = False,
    allow_repartition: AllowRepartition = False,
    as_json: AsJson = False,
) -> None:
    """Create the missing topics and bring settings up to the declaration, after printing the
    plan. Never removes or shrinks anything unless told to; idempotent."""
    current = settings()
    from spectral.devstack import resolve_kafka_bootstrap  # noqa: PLC0415 - after settings
    from spectral.kafka import topic_admin  # noqa: PLC0415

    bootstrap = resolve_kafka_bootstrap(current)
    declared, changes, existing = run(
        _plan(current, bootstrap, allow_shrink=allow_shrink, allow_repartition=allow_repartition)
    )
    _print(declared, changes, as_json=as_json)  # the plan first, then the changes
    if any(c.applies for c in changes):
        run(topic_admin.apply(current, bootstrap, declared, changes, existing))
        if not as_json:
            typer.echo("applied")
