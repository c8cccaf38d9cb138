"""`spectral demo`: both streams end to end on the running stack, narrated for a newcomer.

Every step is an ordinary `spectral` command run as its own process, printed (shell-quoted)
before it runs and followed by what it printed, so what the demo shows is exactly what an
operator would type and see (a command run only to read its JSON is neither printed nor shown;
a consumer's batches are narrated as what its records were, in that deployment's words):

0. `topics apply` creates the topics with their declared settings (nothing is auto-created);
1. failures in: `clusters ingest` a sample of rule-evaluation failures, `clusters tick` turns
   them into cluster snapshots (outbox rows, in the same transaction); a new snapshot waits
   for its suggested rule stub, paid work the `work-executor` runs (relayed and consumed
   here), and the next `clusters tick` lets it out with its stub;
2. `outbox relay --once` publishes the snapshots to Kafka;
3. `consume rule-candidates` applies them exactly once into the triage inbox (its /metrics
   endpoint is scraped while it runs); a second pass over the same topic deduplicates;
4. `triage list` / `triage set` / `triage show`: the operator's side (an empty inbox fails the
   demo);
5. durable LLM work: a story backlog document, a generate-all command, the `work-executor`
   deployment paying the (stub) model once per item, and the thread's ledger history.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import httpx
import typer

from spectral.cli._common import settings
from spectral.devstack import resolve_endpoints
from spectral.devstack.ports import free_port

SAMPLE_FAILURES = Path(str(resources.files(__name__.rpartition(".")[0]) / "sample_failures.jsonl"))
DEMO_PROJECT = "demo-shop"
DEMO_BACKLOG = "demo-backlog"
_BACKLOG = {
    "title": "Demo shop",
    "epics": {
        "E1": {"title": "Checkout"},
        "E2": {"title": "Search"},
        "E3": {"title": "Returns"},
    },
}


def _spectral_bin() -> str:
    return str(Path(sys.executable).with_name("spectral"))


def _step(title: str) -> None:
    typer.secho(f"\n== {title}", bold=True)


def _show(args: list[str] | tuple[str, ...]) -> None:
    typer.secho(f"$ {shlex.join(['spectral', *args])}", fg=typer.colors.CYAN)


def _run(env: dict[str, str], *args: str, show: bool = True, refusal: str = "") -> str:
    """Run ``spectral ARGS``; ``show``: print the command and its output (else neither).

    ``refusal``: the command may refuse (exit 1) for that reason, told to the reader; the demo
    goes on. Any other failure ends the demo with the command's exit status.
    """
    if show:
        _show(args)
    result = subprocess.run(  # noqa: S603 - our own executable with fixed arguments
        [_spectral_bin(), *args], env=env, capture_output=True, text=True, check=False
    )
    if show and result.stdout.strip():
        typer.echo(result.stdout.rstrip())
    if show:
        # Summary lines some commands print on stderr (log lines are JSON and left out).
        for line in result.stderr.splitlines():
            if line.strip() and not line.startswith("{"):
                typer.echo(line)
    if result.returncode == 1 and refusal:
        typer.echo(f"  ({refusal})")
        return result.stdout
    if result.returncode != 0:
        if not show:
            _show(args)
        typer.echo(result.stderr.rstrip(), err=True)
        raise typer.Exit(result.returncode)
    return result.stdout


STALE_MEANS = {
    "rule-candidates": "a snapshot no newer than the one the inbox holds",
    "work-executor": "a wake-up for an item the executor had already claimed on its own poll "
    "(the item ran once; `threads show` below has its outcome)",
}
"""What a record counted ``stale`` means for each deployment the demo runs."""


def _consume_with_metrics(env: dict[str, str], name: str) -> None:
    """Run a deployment until idle, scraping its /metrics endpoint while it runs."""
    port = free_port()
    args = ["consume", name, "--stop-when-idle", "3", "--metrics-port", str(port)]
    _show(args)
    proc = subprocess.Popen(  # noqa: S603
        [_spectral_bin(), *args],
        env={**env, "SPECTRAL_LOG_FORMAT": "json", "SPECTRAL_LOG_LEVEL": "INFO"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    scraped = ""
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        # Keep the last scrape before the process exits: it shows the run's counters.
        with contextlib.suppress(httpx.HTTPError):
            scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        time.sleep(0.3)
    _, stderr = proc.communicate(timeout=300)
    batches = [json.loads(line) for line in stderr.splitlines() if '"event": "batch"' in line]
    for batch in batches:
        counts = ", ".join(
            f"{batch[k]} {k.replace('_', '-')}"
            for k in ("applied", "deduplicated", "stale", "dead_lettered")
            if batch[k]
        )
        typer.echo(f"  a batch of {batch['records']} records: {counts or 'nothing to do'}")
    if any(batch["stale"] for batch in batches):
        typer.echo(f"  (stale: {STALE_MEANS.get(name, 'superseded by what is already stored')})")
    if not batches:
        typer.echo("  (nothing new to apply: every event was already handled)")
    if proc.returncode != 0:
        typer.echo(stderr[-2000:], err=True)
        raise typer.Exit(proc.returncode)
    if scraped:
        typer.echo(f"  metrics were served at http://127.0.0.1:{port}/metrics, e.g.:")
        for line in scraped.splitlines():
            if line.startswith("spectral_consumer_events_total"):
                typer.echo(f"    {line}")


def demo() -> None:
    """Show both streams working end to end on the running local stack (or the configured one)."""
    current = settings()
    endpoints = resolve_endpoints(current)
    env = {
        **os.environ,
        "SPECTRAL_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "SPECTRAL_DATABASE_URL": endpoints.database_url,
        "SPECTRAL_LOG_LEVEL": "WARNING",
    }
    typer.secho("spectral demo: failure clusters -> triage inbox, and durable LLM work", bold=True)

    _step("0. Topics: create spectral's topics with their declared settings")
    _run(env, "topics", "apply")

    _step("1. Failures in: ingest rule-evaluation failures and detect clusters")
    _run(env, "clusters", "ingest", str(SAMPLE_FAILURES))
    _run(env, "clusters", "tick")
    typer.echo(
        "  each new snapshot waits for its suggested rule stub: paid work on the work ledger,\n"
        "  run by the work-executor deployment like every other paid call"
    )
    _run(env, "outbox", "relay", "--once")
    _consume_with_metrics(env, "work-executor")
    _run(env, "clusters", "tick")

    _step("2. Publish: the outbox relay sends the cluster snapshots to Kafka")
    _run(env, "outbox", "relay", "--once")

    _step("3. Consume: the rule-candidates deployment materializes the triage inbox")
    _consume_with_metrics(env, "rule-candidates")

    _step("4. Operators triage")
    listing = json.loads(_run(env, "triage", "list", "--json", show=False))
    _run(env, "triage", "list")
    if not listing:
        typer.secho(
            "the triage inbox is empty: no cluster snapshot reached it (see the steps above)",
            err=True,
            fg="red",
        )
        raise typer.Exit(1)
    first = str(listing[0]["cluster_id"])
    if listing[0]["status"] == "pending":
        _run(env, "triage", "set", first, "--status", "in_review", "--notes", "demo: looking")
    _run(env, "triage", "show", first)

    _step("5. Durable LLM work: a generate-all command, executed once per item")
    with tempfile.TemporaryDirectory() as scratch:
        document = Path(scratch) / "backlog.json"
        document.write_text(json.dumps(_BACKLOG), encoding="utf-8")
        _run(
            env,
            "work",
            "put-document",
            str(document),
            "--project",
            DEMO_PROJECT,
            "--document",
            DEMO_BACKLOG,
            refusal="an earlier demo's generate command changed this document: a document "
            "changes only by mutations, so putting its first content again is refused and the "
            "stored version stays",
        )
    submitted = json.loads(
        _run(
            env,
            "work",
            "submit",
            "--project",
            DEMO_PROJECT,
            "--backlog",
            DEMO_BACKLOG,
            "--all",
            "--json",
        )
    )
    _run(env, "outbox", "relay", "--once")
    _consume_with_metrics(env, "work-executor")
    _run(env, "outbox", "relay", "--once")
    _run(env, "threads", "show", str(submitted["thread_id"]))
    _run(env, "threads", "history", str(submitted["thread_id"]))

    typer.secho(
        "\nDone. Run `make demo` again: nothing is applied twice. `spectral --help` lists "
        "every command; `spectral dev down` stops the stack.",
        bold=True,
    )
