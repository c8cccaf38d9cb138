"""`spectral dlq list | show | redrive`: inspect dead letters and send them back (spectral/dlq/).

``--topic`` takes the source topic T or its dead-letter topic T.dlq, as named in Kafka (with
the topic prefix, if one is configured). The redrive record is read and written as the operator
role (SPECTRAL_OPERATOR_DATABASE_URL when set, else the database URL with the role assumed).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import asyncpg
import typer
from rich.console import Console
from rich.table import Table

from spectral.cli._common import fail, run, settings
from spectral.devstack import resolve_endpoints
from spectral.dlq.records import DeadLetterRecord, Topics, read_dead_letter, read_dead_letters
from spectral.dlq.redrive import RedriveReport, redrive
from spectral.dlq.repository import RedriveRepository, connect_operator
from spectral.settings import Settings

app = typer.Typer(
    help="Dead letters: list, show, and redrive them to their source topic.",
    no_args_is_help=True,
)

T = TypeVar("T")

TopicOption = Annotated[
    str, typer.Option("--topic", help="The source topic T or its dead-letter topic T.dlq.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="JSON on stdout.")]


def _with_connection(use: Callable[[Settings, str, asyncpg.Connection], Awaitable[T]]) -> T:
    current = settings()
    endpoints = resolve_endpoints(current)

    async def go() -> T:
        conn = await connect_operator(current, endpoints.database_url)
        try:
            return await use(current, endpoints.kafka_bootstrap, conn)
        finally:
            await conn.close()

    return run(go())


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


@app.command("list")
def list_(
    *,
    topic: TopicOption,
    reason: Annotated[str | None, typer.Option(help="Only dead letters of this reason.")] = None,
    as_json: JsonOption = False,
) -> None:
    """The dead letters of a topic, oldest first per partition."""
    topics = Topics.of(topic)

    async def load(
        current: Settings, bootstrap: str, conn: asyncpg.Connection
    ) -> tuple[list[DeadLetterRecord], set[tuple[int, int]]]:
        records = await read_dead_letters(current, bootstrap, topics.dlq)
        return records, await RedriveRepository(conn).redriven(topics.dlq)

    records, redriven = _with_connection(load)
    if reason is not None:
        records = [r for r in records if r.reason == reason]
    if as_json:
        _echo_json([r.summary_json(redriven=r.position in redriven) for r in records])
        return
    table = Table(title=f"{topics.dlq} ({len(records)})", title_justify="left")
    for column in ("partition:offset", "failed at", "reason", "consumer", "source", "tries"):
        table.add_column(column, no_wrap=True)
    table.add_column("redriven")
    table.add_column("detail")
    for r in records:
        d = r.dlq
        table.add_row(
            f"{r.partition}:{r.offset}",
            d.get("dlq.failed_at", "")[:19].replace("T", " "),
            r.reason,
            d.get("dlq.consumer", ""),
            r.source,
            str(len(r.history())),
            "yes" if r.position in redriven else "",
            d.get("dlq.detail", "")[:120],
        )
    _console().print(table)


@app.command()
def show(
    *,
    topic: TopicOption,
    offset: Annotated[int, typer.Option(min=0, help="Offset of the dead letter.")],
    partition: Annotated[int, typer.Option(min=0, help="Its partition.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """One dead letter: headers, failure history, the original decoded.

    When the original does not decode: why not, and its first bytes."""
    topics = Topics.of(topic)

    async def load(
        current: Settings, bootstrap: str, conn: asyncpg.Connection
    ) -> tuple[DeadLetterRecord | None, bool]:
        record = await read_dead_letter(current, bootstrap, topics.dlq, partition, offset)
        redriven = await RedriveRepository(conn).redriven(topics.dlq)
        return record, (partition, offset) in redriven

    record, redriven = _with_connection(load)
    if record is None:
        fail(f"no dead letter at {topics.dlq}:{partition}:{offset}")
    view = record.full_json(redriven=redriven)
    if as_json:
        _echo_json(view)
        return
    console = _console()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for name in ("reason", "detail", "consumer", "failed_at", "source", "key", "bytes"):
        facts.add_row(name, str(view[name]))
    facts.add_row("redriven", "yes" if redriven else "no")
    console.print(facts)
    headers = Table(title="headers", title_justify="left")
    headers.add_column("name", no_wrap=True)
    headers.add_column("value")
    for name, value in view["headers"].items():
        headers.add_row(name, value)
    console.print(headers)
    history = Table(title="history (oldest first)", title_justify="left")
    for column in ("failed_at", "reason", "consumer", "source", "detail"):
        history.add_column(column)
    for item in view["history"]:
        history.add_row(
            *(str(item.get(c, "")) for c in ("failed_at", "reason", "consumer")),
            str(item.get("source", "")),
            str(item.get("detail", ""))[:200],
        )
    console.print(history)
    if view["envelope"] is not None:
        console.print("[bold]original (decoded)[/]")
        console.print_json(json.dumps(view["envelope"]))
    else:
        console.print(f"[bold]original does not decode:[/] {view['undecodable']}", markup=True)
        console.print(view["value_preview"], markup=False, highlight=False)


@app.command("redrive")
def redrive_(
    *,
    topic: TopicOption,
    reason: Annotated[str | None, typer.Option(help="Only dead letters of this reason.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be redriven; send nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Send dead letters back to their source topic, each at most once.

    Original key, value and headers (the same idempotency key: deduplicated if applied
    meanwhile) plus the failure history; a record that fails again returns with it."""
    report: RedriveReport = _with_connection(
        lambda current, bootstrap, conn: redrive(
            current, bootstrap, conn, topic=topic, reason=reason, dry_run=dry_run
        )
    )
    if as_json:
        _echo_json(report.to_json())
        return
    verb = "would redrive" if report.dry_run else "redrove"
    skipped = ", ".join(f"{k}={n}" for k, n in report.skipped.items()) or "none"
    typer.echo(
        f"{report.dlq_topic}: {verb} {len(report.redriven)} of {report.examined} dead letters "
        f"to {report.topic}; skipped: {skipped}"
    )
    for r in report.redriven:
        target = "" if r.partition is None else f" -> {report.topic}:{r.partition}:{r.offset}"
        typer.echo(f"  {r.dlq_partition}:{r.dlq_offset} {r.reason}{target}")
