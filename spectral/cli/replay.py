"""`spectral replay NAME ...`: a deployment's handler over a range of its topics.

The logic is spectral/replay/replay.py (no consumer group, no offsets committed, the engine's
idempotent path); this module parses the options, draws the progress bar and the summary.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

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
from spectral.cli.deployments import handler_factory

if TYPE_CHECKING:
    from spectral.replay.replay import Progress as ProgressCallback
    from spectral.replay.replay import ReplayReport

EXIT_INCOMPLETE = 1


def replay(
    name: Annotated[str | None, typer.Argument(help=DEPLOYMENT_HELP, show_default=False)] = None,
    *,
    consumer: Annotated[str | None, deprecated_consumer_option()] = None,
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="From the first offset of every partition.")
    ] = False,
    from_offset: Annotated[
        str | None,
        offsets_option(
            "--from-offset", "From these offsets; only the partitions named are replayed."
        ),
    ] = None,
    from_timestamp: Annotated[
        str | None, timestamp_option("--from-timestamp", "From the first record at or after it.")
    ] = None,
    to_offset: Annotated[
        str | None,
        offsets_option(
            "--to-offset", "Stop before these offsets (exclusive, like Kafka end offsets)."
        ),
    ] = None,
    to_timestamp: Annotated[
        str | None,
        timestamp_option("--to-timestamp", "Stop before the first record at or after it."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="One transaction, rolled back: report what would change; produce nothing.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON summary on stdout.")] = False,
    max_batch: Annotated[int, typer.Option(min=1, help="Most records per batch.")] = 2000,
    beyond_horizon: Annotated[
        bool,
        typer.Option(
            "--beyond-horizon",
            help="Replay records older than the dedup horizon too (their keys may be forgotten).",
        ),
    ] = False,
) -> None:
    """Replay a range of a consumer's topics through its handler.

    Exactly as the live consumer would apply it (dedup, stale guard, dead letters), outside any
    consumer group: the live group's offsets are untouched. Without --to-*, the range ends at
    the end offsets of when the replay starts."""
    # The Kafka client, the engine and the database driver load when the command runs, not for
    # --help.
    from spectral.replay.range import check_order, start_of, stop_of  # noqa: PLC0415

    try:
        start = start_of(
            from_beginning=from_beginning, from_offset=from_offset, from_timestamp=from_timestamp
        )
        stop = stop_of(to_offset, to_timestamp)
        check_order(start, stop)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    deployment = deployment_name(name, consumer, "replay")
    current = settings()
    from spectral.devstack import resolve_endpoints  # noqa: PLC0415
    from spectral.replay.replay import Mode, ReplayRequest  # noqa: PLC0415
    from spectral.replay.replay import replay as run_replay  # noqa: PLC0415

    endpoints = resolve_endpoints(current)
    make_handler = handler_factory(deployment, current)
    request = ReplayRequest(
        start=start,
        stop=stop,
        mode=Mode.DRY_RUN if dry_run else Mode.APPLY,
        max_batch=max_batch,
        beyond_horizon=beyond_horizon,
    )
    run_and_report(
        f"replay {deployment}",
        lambda progress: run_replay(
            make_handler,
            current,
            kafka_bootstrap=endpoints.kafka_bootstrap,
            database_url=endpoints.database_url,
            request=request,
            progress=progress,
        ),
        refused=ValueError,  # a range naming partitions the topics do not have
        code=2,
        as_json=as_json,
    )


def run_and_report(
    title: str,
    job: Callable[[ProgressCallback | None], Coroutine[Any, Any, ReplayReport]],
    *,
    refused: type[Exception],
    code: int,
    as_json: bool,
) -> None:
    """Run a replay (or a rebuild) behind a progress bar and print its report; ``refused`` is
    the error it may expect (one line, exit ``code``); an incomplete run exits 1."""
    with progress_bar(title) as progress:
        try:
            report = run(job(progress))
        except refused as exc:
            fail(str(exc), code)
    print_report(report, as_json=as_json)
    if not report.complete:
        raise typer.Exit(EXIT_INCOMPLETE)


@contextmanager
def progress_bar(title: str) -> Iterator[ProgressCallback | None]:
    """A rich progress bar on stderr when it is a terminal; no callback otherwise."""
    from rich.console import Console  # noqa: PLC0415 - printing only
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(title, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=max(total, done))

        yield update


def print_report(report: ReplayReport, *, as_json: bool) -> None:
    """The summary: JSON on stdout, or tables on a terminal."""
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        return
    from rich.console import Console  # noqa: PLC0415 - printing only
    from rich.table import Table  # noqa: PLC0415

    from spectral.engine.handler import Outcome  # noqa: PLC0415
    from spectral.replay.replay import Mode  # noqa: PLC0415

    console = Console() if sys.stdout.isatty() else Console(width=160)
    verb = {
        Mode.APPLY: "replayed",
        Mode.DRY_RUN: "dry run (rolled back, nothing produced)",
        Mode.ATOMIC: "committed" if report.committed else "rolled back",
    }[report.mode]
    state = "complete" if report.complete else "INCOMPLETE (stopped before the end)"
    console.print(
        f"[bold]{report.consumer}[/] {verb}: {report.records} of at most {report.total} "
        f"records, {state}, {report.seconds:.1f} s"
    )
    outcomes = Table(title="outcomes", title_justify="left")
    for outcome in Outcome:
        outcomes.add_column(outcome.value, justify="right")
    outcomes.add_row(*(str(report.counts.get(o, 0)) for o in Outcome))
    console.print(outcomes)
    if report.dead_letter_reasons:
        reasons = ", ".join(f"{r}={n}" for r, n in sorted(report.dead_letter_reasons.items()))
        label = "would be dead-lettered" if report.mode is not Mode.APPLY else "dead-lettered"
        console.print(f"{label}: {reasons}")
        for note in report.dead_letters:
            console.print(f"  {note.source}  {note.reason}: {note.detail}", markup=False)
    if report.hook_facts:
        console.print(
            "rebuild: " + ", ".join(f"{k}={v}" for k, v in sorted(report.hook_facts.items()))
        )
    if report.mode is not Mode.APPLY:
        changes = Table(
            title="row changes" + (" (rolled back)" if not report.committed else ""),
            title_justify="left",
        )
        for column in ("table", "inserted", "updated", "deleted"):
            changes.add_column(column, justify="left" if column == "table" else "right")
        for change in report.changes:
            changes.add_row(
                change.table, str(change.inserted), str(change.updated), str(change.deleted)
            )
        if not report.changes:
            changes.add_row("(none)", "0", "0", "0")
        console.print(changes)
