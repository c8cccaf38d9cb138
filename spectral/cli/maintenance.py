"""`spectral maintenance`: prune the dedup record, the outbox and every table that grows with
traffic behind their horizons.

The logic is spectral/maintenance/ (policy.py decides, run.py is one pass, retention.py prunes
the other tables); this module wires the deployments' topics, the broker's retention, the
retention tasks (spectral's own and the features') and the metrics endpoint, and prints the
report.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import timedelta
from typing import Annotated, Any

import typer
from prometheus_client import REGISTRY

from spectral.cli._common import (
    EXIT_FAILURE,
    METRICS_HOST_HELP,
    METRICS_PORT_HELP,
    run,
    serve_health,
    settings,
)
from spectral.cli.deployments import what_each_reads
from spectral.db.connect import ping
from spectral.devstack import Endpoints, resolve_endpoints
from spectral.faults import Component
from spectral.kafka.retention import BrokerRetention, describe_retention
from spectral.lifecycle import stopping_on_signals
from spectral.maintenance.metrics import (
    LAST_SUCCESS,
    MAINTENANCE_JOB,
    MaintenanceMetrics,
    RunOutcome,
)
from spectral.maintenance.repository import MaintenanceRepository
from spectral.maintenance.retention import (
    DeadLetterTable,
    DescribeRetention,
    Redrives,
    RetentionTask,
    Tokens,
)
from spectral.maintenance.run import MaintenanceOptions, MaintenanceReport, maintain
from spectral.observability.health import run_with_health
from spectral.observability.logging import get_logger
from spectral.observability.metrics import push
from spectral.plugins import retention_factories
from spectral.retry import Backoff
from spectral.service import Supervised
from spectral.settings import Settings

log = get_logger(__name__)


def maintenance(
    *,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Decide and report everything; change nothing.")
    ] = False,
    every: Annotated[
        float | None,
        typer.Option(
            "--every",
            min=1.0,
            metavar="SECONDS",
            help="Run a pass every SECONDS until SIGTERM/SIGINT (a deployment's service).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON on stdout.")] = False,
    metrics_port: Annotated[int | None, typer.Option(help=METRICS_PORT_HELP)] = None,
    metrics_host: Annotated[str | None, typer.Option(help=METRICS_HOST_HELP)] = None,
) -> None:
    """Prune published outbox rows and forget dedup keys behind the horizon.

    The dedup horizon comes from the broker: a key is forgotten only once no record that carries
    it can still be read (retention.ms + segment.ms + timestamp skew + the broker's retention
    check, plus SPECTRAL_DEDUP_GRACE_SECONDS; at least SPECTRAL_DEDUP_MIN_HORIZON_SECONDS).
    Published outbox rows are kept SPECTRAL_OUTBOX_RETENTION_SECONDS; unpublished rows never
    leave. Dead letters of core.dead_letters, redrive records, revoked or expired tokens and
    ingested failures go behind their retention (SPECTRAL_DEAD_LETTER_TABLE_RETENTION_SECONDS,
    the topics' retention, SPECTRAL_TOKEN_RETENTION_SECONDS,
    SPECTRAL_CLUSTER_FAILURE_RETENTION_SECONDS); the work ledger and the triage audit trail are
    kept, and measured. Exit 1 when a step failed; a rotation held back for a reason is
    reported, not failed.
    """
    current = settings()
    metrics = MaintenanceMetrics(REGISTRY)
    if every is not None:
        endpoints = resolve_endpoints(current)
        one_pass = _passes(current, endpoints, metrics, dry_run=dry_run)
        health = serve_health(current, metrics_port, metrics_host)
        health.probe("database", lambda: ping(endpoints.database_url))
        run(run_with_health(health, _every(one_pass, every, metrics, as_json=as_json)))
        return
    report: MaintenanceReport | None = None
    try:
        endpoints = resolve_endpoints(current)
        serve_health(current, metrics_port, metrics_host)
        report = run(_passes(current, endpoints, metrics, dry_run=dry_run)())
    except Exception:
        metrics.runs[RunOutcome.FAILED].inc()
        raise
    finally:
        # A CronJob's pass is scraped by nobody: its series go to the Pushgateway, the last
        # success's timestamp only when this pass is one.
        push(
            current.metrics_pushgateway,
            MAINTENANCE_JOB,
            leave_out=() if report is not None and report.ok else (LAST_SUCCESS,),
        )
    _print(report, as_json=as_json)
    if not report.ok:
        raise typer.Exit(EXIT_FAILURE)


def _passes(
    current: Settings, endpoints: Endpoints, metrics: MaintenanceMetrics, *, dry_run: bool
) -> Callable[[], Coroutine[Any, Any, MaintenanceReport]]:
    """One maintenance pass, ready to run (once, or every so often)."""
    options = MaintenanceOptions(
        outbox_retention=timedelta(seconds=current.outbox_retention_seconds),
        min_dedup_horizon=timedelta(seconds=current.dedup_min_horizon_seconds),
        grace=timedelta(seconds=current.dedup_grace_seconds),
        lock_timeout=timedelta(seconds=current.maintenance_lock_timeout_seconds),
        dry_run=dry_run,
    )
    consumers = deployment_topics(current, endpoints.database_url)

    async def describe(topics: Sequence[str]) -> BrokerRetention:
        return await describe_retention(current, endpoints.kafka_bootstrap, topics)

    tasks = retention_tasks(current, describe, options.grace)

    async def one_pass() -> MaintenanceReport:
        repo = await MaintenanceRepository.open(endpoints.database_url)
        try:
            return await maintain(repo, consumers, describe, options, metrics, retention=tasks)
        finally:
            await repo.close()

    return one_pass


def retention_tasks(
    current: Settings, describe: DescribeRetention, grace: timedelta
) -> list[RetentionTask]:
    """spectral's own retention tasks, from the settings, and every plugin's (spectral's built-in
    features among them: the failures, the tables kept by design)."""
    if current.dead_letter_table_retention_seconds is not None:
        dead_letters: timedelta | None = timedelta(
            seconds=current.dead_letter_table_retention_seconds
        )
    else:
        kept = current.dlq_retention_ms
        dead_letters = None if kept < 0 else timedelta(milliseconds=kept)
    own: list[RetentionTask] = [
        DeadLetterTable(dead_letters),
        Redrives(describe, grace),
        Tokens(timedelta(seconds=current.token_retention_seconds)),
    ]
    return own + [task for factory in retention_factories() for task in factory(current)]


def deployment_topics(current: Settings, database_url: str) -> Mapping[str, Sequence[str]]:
    """Each deployment's consumer name and the topics it reads."""
    return {
        reads.consumer: list(reads.topics(current.topic_prefix))
        for reads in run(what_each_reads(current, database_url))
    }


async def _every(
    one_pass: Callable[[], Awaitable[MaintenanceReport]],
    seconds: float,
    metrics: MaintenanceMetrics,
    *,
    as_json: bool,
) -> None:
    """A pass every ``seconds`` until SIGTERM/SIGINT: a supervised loop (spectral.service), so
    a database outage is logged when it starts and ends, not at every pass."""

    async def step() -> None:
        report = await one_pass()
        if as_json:
            typer.echo(json.dumps(report.to_json()))

    def failed(_exc: BaseException, _component: str | None) -> None:
        metrics.runs[RunOutcome.FAILED].inc()

    passes = Supervised(
        "maintenance",
        _periodic(step, seconds),
        backoff=Backoff(base=1.0, cap=seconds),
        component=Component.DATABASE,
        retries_any_failure=True,
        on_fault=failed,
    )
    with stopping_on_signals(passes.stop_soon):
        await passes.run()
    log.info("maintenance stopped")


def _periodic(
    step: Callable[[], Awaitable[None]], seconds: float
) -> Callable[[], Awaitable[float]]:
    async def once() -> float:
        await step()
        return seconds

    return once


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:,.1f} MiB"


def _print(report: MaintenanceReport, *, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    if report.busy:
        typer.echo("another maintenance run holds the lock; nothing done")
        return
    would = "would " if report.dry_run else ""
    outbox = report.outbox
    pruned = ", ".join(f"generation {g} (~{n:,} rows)" for g, n in sorted(outbox.pruned.items()))
    typer.echo(
        f"outbox: {would}prune {pruned or 'nothing'}; "
        + (f"{would}start generation {outbox.started}; " if outbox.started else "")
        + (
            f"{would}move {outbox.moved_delayed_rows:,} delayed rows; "
            if outbox.moved_delayed_rows
            else ""
        )
        + (
            f"generations waiting for the relay: {outbox.waiting_for_relay}"
            if outbox.waiting_for_relay
            else "no generation waits for the relay"
        )
        + (f"; ERROR {outbox.error}" if outbox.error else "")
    )
    dedup = report.dedup
    horizon = (
        f"horizon {timedelta(seconds=round(dedup.horizon_seconds))}"
        if dedup.horizon_seconds is not None
        else "horizon not computed"
    )
    if dedup.hold.value == "none":
        action = (
            f"{would}forget generation {dedup.forgotten_generation} (~{dedup.forgotten_rows:,} "
            f"rows) and start generation {dedup.started}"
            if dedup.forgotten_generation is not None
            else f"{would}start generation {dedup.started} (nothing to forget yet)"
        )
    else:
        action = f"held: {dedup.hold.value}"
        if dedup.unknown_consumers:
            action += f" (consumers with no deployment: {', '.join(dedup.unknown_consumers)})"
        if dedup.unbounded_topics:
            action += f" (topics keeping records for ever: {', '.join(dedup.unbounded_topics)})"
    typer.echo(f"dedup: {horizon}; {action}" + (f"; ERROR {dedup.error}" if dedup.error else ""))
    for table, (rows, size) in report.totals().items():
        typer.echo(f"{table}: ~{rows:,} rows, {_mib(size)}")
    _print_retention(report, would)


def _print_retention(report: MaintenanceReport, would: str) -> None:
    sizes = {s.table: s for s in report.table_sizes}
    for pruned in report.retention:
        size = sizes.get(pruned.table)
        measured = f"~{size.rows:,} rows, {_mib(size.bytes)}" if size is not None else "absent"
        if pruned.held is not None and not pruned.rows:
            action = pruned.held
        else:
            older = (
                f" older than {timedelta(seconds=round(pruned.horizon_seconds))}"
                if pruned.horizon_seconds is not None
                else ""
            )
            more = " (more next pass)" if pruned.more else ""
            action = f"{would}prune {pruned.rows:,} rows{older}{more}"
        typer.echo(f"{pruned.table}: {measured}; {action}")
    for table, error in report.retention_errors.items():
        typer.echo(f"{table}: ERROR {error}")


__all__ = ["maintenance"]
