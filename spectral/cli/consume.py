"""`spectral consume NAME`: run a consumer deployment as a member of its consumer group."""

from __future__ import annotations

import typer
from prometheus_client import REGISTRY

from spectral.cli._common import (
    DEPLOYMENT_HELP,
    MAX_PORT,
    METRICS_HOST_HELP,
    METRICS_PORT_HELP,
    run,
    serve_health,
    settings,
    warn_missing_topics,
)
from spectral.cli._common import (
    summary as print_summary,
)
from spectral.cli.deployments import factory
from spectral.devstack import resolve_endpoints
from spectral.engine.collector import tune_for_batches
from spectral.engine.engine import ConsumerEngine, EngineOptions, RunSummary
from spectral.lifecycle import process_loop
from spectral.observability.health import run_with_health
from spectral.observability.progress import ProgressMonitor

COMMIT_INTERVAL = 0.5
"""``spectral consume``'s offset commits, at most every half second: at 2,000 events/s in
20-record batches a commit after each batch cost ~60 us an event of the machine's CPU (the
broker's and the consumer's), and what a crash re-reads is deduplicated anyway."""


def consume(  # noqa: PLR0917 - typer maps each parameter to an option
    name: str = typer.Argument(..., help=DEPLOYMENT_HELP, show_default=False),
    group: str | None = typer.Option(
        None, help="Consumer group (default: the topic prefix + the deployment name)."
    ),
    stop_when_idle: float | None = typer.Option(
        None,
        "--stop-when-idle",
        min=0.0,
        help="Exit 0 once no record arrived for this many seconds.",
    ),
    max_batch: int = typer.Option(
        2000,
        min=1,
        help="Records per fetch, and per batch (one transaction) unless --batch-growth is above 1.",
    ),
    batch_growth: int = typer.Option(
        EngineOptions.batch_growth,
        min=1,
        help="A backlog grows a batch up to this x --max-batch records (1: a batch is one fetch).",
    ),
    commit_interval: float = typer.Option(
        COMMIT_INTERVAL,
        min=0.0,
        help="Seconds between two offset commits (0: after every batch); revocations, a stop "
        "and an idle wait commit what is pending. A crash re-reads at most this much, and "
        "finds it handled.",
    ),
    metrics_port: int | None = typer.Option(None, help=METRICS_PORT_HELP, min=0, max=MAX_PORT),
    metrics_host: str | None = typer.Option(None, help=METRICS_HOST_HELP),
) -> None:
    """Apply a deployment's events exactly once; SIGTERM/SIGINT commit, leave the group, exit 0."""
    current = settings()
    endpoints = resolve_endpoints(current)
    handler = factory(name)(current, endpoints.database_url, REGISTRY)
    health = serve_health(current, metrics_port, metrics_host)
    monitor = ProgressMonitor(
        handler.name,
        REGISTRY,
        health,
        interval=current.lag_interval_seconds,
        stall_after=current.stall_after_seconds,
    )
    engine = ConsumerEngine(
        handler,
        current,
        kafka_bootstrap=endpoints.kafka_bootstrap,
        database_url=endpoints.database_url,
        options=EngineOptions(
            group=group,
            max_batch=max_batch,
            batch_growth=batch_growth,
            stop_when_idle=stop_when_idle,
            commit_interval=commit_interval,
        ),
        hook=monitor,
    )
    warn_missing_topics(current, endpoints.kafka_bootstrap, handler.event_types)
    tune_for_batches()
    summary: RunSummary = run(run_with_health(health, engine.run()), loop_factory=process_loop())
    print_summary(" ".join(f"{outcome.value}={count}" for outcome, count in summary.counts.items()))
