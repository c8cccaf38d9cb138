"""`spectral clusters ingest | tick | criticality | list`: the FailureClusterService."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import typer

from producers.clusters import Criticality
from spectral.cli._common import (
    MAX_PORT,
    METRICS_HOST_HELP,
    METRICS_PORT_HELP,
    fail,
    run,
    serve_health,
    settings,
)

app = typer.Typer(
    help="FailureClusterService: failures in, cluster snapshots out (ADR-057).",
    no_args_is_help=True,
)


def _lines(source: str) -> Iterator[bytes]:
    if source == "-":
        yield from sys.stdin.buffer
        return
    path = Path(source)
    if not path.is_file():
        fail(f"{source}: no such file")
    with path.open("rb") as handle:
        yield from handle


@app.command()
def ingest(
    source: str = typer.Argument(..., help="A file of JSON lines, or - for standard input."),
    batch: int = typer.Option(1000, min=1, help="Failures per transaction."),
) -> None:
    """Record failure observations (JSON lines: failure_id, rule_id, workspace_id, observed_at,
    summary, optional signature, any other fields kept). Idempotent by failure_id."""
    current = settings()
    from prometheus_client import REGISTRY  # noqa: PLC0415 - after settings

    from producers.clusters import ClusterMetrics, FailureClusterService  # noqa: PLC0415
    from spectral.devstack import resolve_database_url  # noqa: PLC0415

    url = resolve_database_url(current)

    async def go() -> None:
        async with FailureClusterService.connect(url, metrics=ClusterMetrics(REGISTRY)) as svc:
            summary = await svc.ingest_lines(_lines(source), batch=batch)
        for error in summary.errors:
            typer.echo(f"invalid: {error}", err=True)
        typer.echo(
            f"received={summary.received} inserted={summary.inserted} "
            f"duplicates={summary.duplicates} invalid={summary.invalid} "
            f"clusters_detected={summary.clusters_minted}"
        )
        if summary.invalid:
            raise typer.Exit(1)

    run(go())


@app.command()
def tick(
    *,
    every: float | None = typer.Option(
        None, "--every", min=0.05, help="Keep ticking every SECONDS until SIGTERM/SIGINT."
    ),
    stubs: bool = typer.Option(
        default=True,
        help="Ask for a suggested_rule_stub: paid work on the work ledger, run by the "
        "work-executor deployment.",
    ),
    stub_wait: float = typer.Option(
        60.0,
        min=0.0,
        help="Seconds a snapshot waits for its stub's first call before it goes out without "
        "it (the stub follows in a new snapshot).",
    ),
    lease_timeout: float | None = typer.Option(
        None, hidden=True, help="Deprecated: SPECTRAL_WORK_LEASE_TIMEOUT_SECONDS."
    ),
    stub_max_attempts: int | None = typer.Option(
        None, hidden=True, help="Deprecated: SPECTRAL_WORK_MAX_ATTEMPTS."
    ),
    stub_retry_base: float | None = typer.Option(
        None, hidden=True, help="Deprecated: SPECTRAL_WORK_RETRY_BASE_SECONDS."
    ),
    min_failures: int = typer.Option(1, min=1, help="Publish clusters of at least N failures."),
    default_criticality: Criticality = typer.Option(
        Criticality.NORMAL, help="Criticality of rules without a configured one."
    ),
    metrics_port: int | None = typer.Option(None, help=METRICS_PORT_HELP, min=0, max=MAX_PORT),
    metrics_host: str | None = typer.Option(None, help=METRICS_HOST_HELP),
) -> None:
    """Re-evaluate changed clusters and put changed snapshots in the outbox. Safe to run on
    several replicas at once."""
    current = settings()
    # The service (database driver, metrics) loads once the settings are good: `clusters
    # --help` and a bad setting do not pay for it.
    from prometheus_client import REGISTRY  # noqa: PLC0415

    from producers.clusters import (  # noqa: PLC0415
        ClusterMetrics,
        ClusterPolicy,
        FailureClusterService,
    )
    from spectral.db.connect import ping  # noqa: PLC0415
    from spectral.devstack import resolve_database_url  # noqa: PLC0415
    from spectral.lifecycle import stopping_on_signals  # noqa: PLC0415
    from spectral.observability.health import run_with_health  # noqa: PLC0415

    url = resolve_database_url(current)
    for flag, value, setting in (
        ("--lease-timeout", lease_timeout, "SPECTRAL_WORK_LEASE_TIMEOUT_SECONDS"),
        ("--stub-max-attempts", stub_max_attempts, "SPECTRAL_WORK_MAX_ATTEMPTS"),
        ("--stub-retry-base", stub_retry_base, "SPECTRAL_WORK_RETRY_BASE_SECONDS"),
    ):
        if value is not None:
            typer.echo(
                f"warning: {flag} is ignored: rule stubs are work on the work ledger, leased and "
                f"retried by the work executor ({setting}); the option goes in the next release",
                err=True,
            )
    policy = ClusterPolicy(
        default_criticality=default_criticality,
        min_failures=min_failures,
        generate_stubs=stubs,
        stub_wait=timedelta(seconds=stub_wait),
    )
    health = serve_health(current, metrics_port, metrics_host)
    health.probe("database", lambda: ping(url))

    async def go() -> None:
        async with FailureClusterService.connect(
            url, policy=policy, metrics=ClusterMetrics(REGISTRY)
        ) as svc:
            if every is None:
                report = await svc.tick()
                typer.echo(" ".join(f"{k}={v}" for k, v in vars(report).items()))
                return
            stop = asyncio.Event()
            with stopping_on_signals(stop.set):
                await run_with_health(health, svc.run(every, stop))

    run(go())


@app.command()
def criticality(
    rule_id: UUID = typer.Argument(..., help="The rule."),
    level: Criticality = typer.Argument(..., help="low | normal | high | critical"),
) -> None:
    """Set a rule's criticality (an input of the severity policy)."""
    current = settings()
    from producers.clusters import FailureClusterService  # noqa: PLC0415 - after settings
    from spectral.devstack import resolve_database_url  # noqa: PLC0415

    url = resolve_database_url(current)

    async def go() -> None:
        async with FailureClusterService.connect(url) as svc:
            await svc.set_criticality(rule_id, level)

    run(go())
    typer.echo(f"rule {rule_id}: criticality {level.value}")


@app.command("list")
def list_() -> None:
    """The producer's clusters: id, key, revision, last published hash."""
    current = settings()
    from producers.clusters import FailureClusterService  # noqa: PLC0415 - after settings
    from spectral.devstack import resolve_database_url  # noqa: PLC0415

    url = resolve_database_url(current)

    async def go() -> None:
        async with FailureClusterService.connect(url) as svc:
            rows = await svc.repository.list_clusters()
        for r in rows:
            state = "dirty" if r.revision > r.evaluated_revision else "clean"
            typer.echo(
                f"{r.cluster_id}  {r.workspace_id}  {r.rule_id}  {r.signature}  "
                f"rev={r.revision} {state} published={r.published_hash or '-'}"
            )

    run(go())
