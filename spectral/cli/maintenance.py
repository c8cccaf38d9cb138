"""`spectral maintenance`: prune the dedup record and the outbox behind their horizons.

The logic is spectral/maintenance/ (policy.py decides, run.py is one pass); this module wires the
deployments' topics, the broker's retention and the metrics endpoint, and prints the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Annotated

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
from spectral.devstack import resolve_endpoints
from spectral.errors import SpectralError
from spectral.kafka.retention import BrokerRetention, describe_retention
from spectral.lifecycle import stopping_on_signals
from spectral.maintenance.metrics import MaintenanceMetrics, RunOutcome
from spectral.maintenance.repository import MaintenanceRepository
from spectral.maintenance.run import MaintenanceOptions, MaintenanceReport, maintain
from spectral.observability.health import run_with_health
from spectral.observability.logging import get_logger
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
    leave. Exit 1 when a step failed; a rotation held back for a reason is reported, not failed.
    """
    current = settings()
    endpoints = resolve_endpoints(current)
    options = MaintenanceOptions(
        outbox_retention=timedelta(seconds=current.outbox_retention_seconds),
        min_dedup_horizon=timedelta(seconds=current.dedup_min_horizon_seconds),
        grace=timedelta(seconds=current.dedup_grace_seconds),
        lock_timeout=timedelta(seconds=current.maintenance_lock_timeout_seconds),
        dry_run=dry_run,
    )
    consumers = deployment_topics(current, endpoints.database_url)
    metrics = MaintenanceMetrics(REGISTRY)
    health = serve_health(current, metrics_port, metrics_host)
    health.probe("database", lambda: ping(endpoints.database_url))

    async def describe(topics: Sequence[str]) -> BrokerRetention:
        return await describe_retention(current, endpoints.kafka_bootstrap, topics)

    async def one_pass() -> MaintenanceReport:
        repo = await MaintenanceRepository.open(endpoints.database_url)
        try:
            return await maintain(repo, consumers, describe, options, metrics)
        finally:
            await repo.close()

    if every is None:
        report = run(one_pass())
        _print(report, as_json=as_json)
        if not report.ok:
            raise typer.Exit(EXIT_FAILURE)
        return
    run(run_with_health(health, _every(one_pass, every, metrics, as_json=as_json)))


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
    stop = asyncio.Event()
    with stopping_on_signals(stop.set):
        while not stop.is_set():
            try:
                report = await one_pass()
                if as_json:
                    typer.echo(json.dumps(report.to_json()))
            except SpectralError as exc:
                metrics.runs[RunOutcome.FAILED].inc()
                log.warning("maintenance pass failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=seconds)
    log.info("maintenance stopped")


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


__all__ = ["maintenance"]
