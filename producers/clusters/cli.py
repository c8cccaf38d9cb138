"""`spectral clusters ingest | tick | criticality | list`: the FailureClusterService."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import typer
from prometheus_client import REGISTRY

from producers.clusters import (
    ClusterMetrics,
    ClusterPolicy,
    Criticality,
    FailureClusterService,
)
from spectral.cli._common import (
    MAX_PORT,
    METRICS_HOST_HELP,
    METRICS_PORT_HELP,
    fail,
    run,
    serve_health,
    settings,
)
from spectral.db.connect import ping
from spectral.devstack import resolve_database_url
from spectral.lifecycle import stopping_on_signals
from spectral.llm.seam import Synthesizer
from spectral.llm.settings import LlmSettings
from spectral.llm.stub import StubSynthesizer
from spectral.observability.health import run_with_health
from spectral.settings import Settings

app = typer.Typer(
    help="FailureClusterService: failures in, cluster snapshots out (ADR-057).",
    no_args_is_help=True,
)


@asynccontextmanager
async def _synthesizer(current: Settings) -> AsyncIterator[Synthesizer]:
    """The synthesizer the settings choose (SPECTRAL_SYNTHESIZER): the deterministic stub by
    default, or an OpenAI-compatible gateway."""
    if LlmSettings.of(current).synthesizer == "openai":
        from spectral.llm.openai_compat import OpenAICompatSynthesizer  # noqa: PLC0415

        client = OpenAICompatSynthesizer.from_settings(current)
        try:
            yield client
        finally:
            await client.aclose()
    else:
        yield StubSynthesizer()


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
    url = resolve_database_url(settings())

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
        default=True, help="Ask the synthesizer for suggested_rule_stub (lease-then-LLM)."
    ),
    lease_timeout: float = typer.Option(
        300.0, min=1.0, help="Seconds after which a pending stub lease is re-claimed."
    ),
    stub_max_attempts: int = typer.Option(
        3, min=1, help="Paid stub calls per cluster content at most (ADR-0008 MaxAttempts)."
    ),
    stub_retry_base: float = typer.Option(
        1.0,
        min=0.001,
        help="Backoff base in seconds: retry n of a stub waits min(base*2^(n-1), base*10).",
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
    url = resolve_database_url(current)
    policy = ClusterPolicy(
        default_criticality=default_criticality,
        min_failures=min_failures,
        generate_stubs=stubs,
        stub_lease_timeout=timedelta(seconds=lease_timeout),
        stub_max_attempts=stub_max_attempts,
        stub_retry_base=timedelta(seconds=stub_retry_base),
    )
    health = serve_health(current, metrics_port, metrics_host)
    health.probe("database", lambda: ping(url))

    async def go() -> None:
        async with (
            _synthesizer(current) as synth,
            FailureClusterService.connect(
                url, synthesizer=synth, policy=policy, metrics=ClusterMetrics(REGISTRY)
            ) as svc,
        ):
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
    url = resolve_database_url(settings())

    async def go() -> None:
        async with FailureClusterService.connect(url) as svc:
            await svc.set_criticality(rule_id, level)

    run(go())
    typer.echo(f"rule {rule_id}: criticality {level.value}")


@app.command("list")
def list_() -> None:
    """The producer's clusters: id, key, revision, last published hash."""
    url = resolve_database_url(settings())

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
