"""`spectral dlq list | show | redrive`: inspect dead letters and send them back (spectral/dlq/).

``--topic`` takes the source topic T or its dead-letter topic T.dlq, as named in Kafka (with
the topic prefix, if one is configured). The redrive record is read and written as the operator
role (SPECTRAL_OPERATOR_DATABASE_URL when set, else the database URL with the role assumed).

``list`` and ``show`` also show the rows of ``core.dead_letters`` (dead letters the broker
refused even as a reference). Everything shown comes from records anyone could have written:
it is printed as plain text, never as markup.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from spectral.cli._common import fail, run, settings

if TYPE_CHECKING:
    import asyncpg
    from rich.console import Console
    from rich.text import Text

    from spectral.dlq.records import DeadLetterPage, Topics
    from spectral.dlq.redrive import RedriveReport
    from spectral.dlq.store import StoredDeadLetter
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
    from spectral.devstack import resolve_endpoints  # noqa: PLC0415 - after settings
    from spectral.dlq.repository import connect_operator  # noqa: PLC0415

    endpoints = resolve_endpoints(current)

    async def go() -> T:
        conn = await connect_operator(current, endpoints.database_url)
        try:
            return await use(current, endpoints.kafka_bootstrap, conn)
        finally:
            await conn.close()

    return run(go())


def _console() -> Console:
    from rich.console import Console  # noqa: PLC0415 - printing only

    console = Console()
    return console if console.is_terminal else Console(width=200)


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _plain(value: object) -> Text:
    """A table cell or line shown as it is (no markup, no emoji codes)."""
    from rich.text import Text  # noqa: PLC0415 - printing only

    return Text(str(value))


def _stored_summary(row: StoredDeadLetter) -> dict[str, Any]:
    return {
        "in": "core.dead_letters",
        "id": row.id,
        "partition": None,
        "offset": None,
        "reason": row.reason,
        "detail": row.detail,
        "consumer": row.consumer,
        "failed_at": row.failed_at.isoformat(),
        "source": row.source,
        "earlier_failures": len(row.history),
        "redriven": False,
        "key": row.key.decode("utf-8", "replace") if row.key is not None else None,
        "bytes": row.value_size,
        "refusal": row.refusal,
    }


def _stored_full(row: StoredDeadLetter) -> dict[str, Any]:
    from spectral.dlq.records import DeadLetterRecord  # noqa: PLC0415 - see list_

    record = DeadLetterRecord(
        topic="core.dead_letters",
        partition=row.source_partition,
        offset=row.source_offset,
        timestamp_ms=0,
        key=row.key,
        value=row.value_head,
        headers=row.headers,
    )
    envelope, problem = record.decoded() if row.complete else (None, "value not kept whole")
    return {
        **_stored_summary(row),
        "value_sha256": row.value_sha256,
        "bytes_kept": len(row.value_head),
        "header_count": row.header_count,
        "headers": {k: "" if v is None else v.decode("utf-8", "replace") for k, v in row.headers},
        "history": list(row.history),
        "envelope": envelope,
        "undecodable": problem,
        "value_preview": None
        if envelope is not None
        else row.value_head[:500].decode("utf-8", "replace"),
    }


@app.command("list")
def list_(
    *,
    topic: TopicOption,
    reason: Annotated[str | None, typer.Option(help="Only dead letters of this reason.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=100_000, help="Dead letters shown at most.")
    ] = 1000,
    after: Annotated[
        str | None,
        typer.Option(
            metavar="P:O", help="Start after this dead letter (the next page of a listing)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The dead letters of a topic, oldest first per partition, then those of the table.

    At most --limit of them (values are never loaded); when more follow, a line on stderr
    says how to go on (--after P:O)."""
    # Each command loads the dead-letter modules (Kafka client, database driver) when it runs:
    # `spectral dlq --help` does not.
    from spectral.dlq.records import (  # noqa: PLC0415
        Topics,
        format_position,
        list_dead_letters,
        parse_position,
    )
    from spectral.dlq.repository import RedriveRepository  # noqa: PLC0415
    from spectral.dlq.store import stored  # noqa: PLC0415

    topics = Topics.of(topic)
    try:
        position = None if after is None else parse_position(after)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc

    async def load(
        current: Settings, bootstrap: str, conn: asyncpg.Connection
    ) -> tuple[DeadLetterPage, set[tuple[int, int]], list[StoredDeadLetter]]:
        page = await list_dead_letters(
            current, bootstrap, topics.dlq, reason=reason, limit=limit, after=position
        )
        positions = [s.position for s in page.summaries]
        redriven = await RedriveRepository(conn).redriven(topics.dlq, positions)
        return page, redriven, await stored(conn, topics.source, reason=reason, limit=limit)

    page, redriven, rows = _with_connection(load)
    if not page.exists and not rows:
        current = settings()
        prefix = f" (topic prefix {current.topic_prefix!r})" if current.topic_prefix else ""
        fail(
            f"no topic {topics.dlq} on the broker{prefix}, and no dead letter of "
            f"{topics.source} in core.dead_letters: check the name (`spectral topics plan` "
            "lists the topics)"
        )
    records = page.summaries
    if as_json:
        _echo_json(
            [r.to_json(redriven=r.position in redriven) for r in records]
            + [_stored_summary(r) for r in rows]
        )
    else:
        _print_list(topics, page, redriven, rows)
    if page.next_after is not None:
        typer.echo(
            f"{len(records)} shown of {page.total} on {topics.dlq}; more may follow: "
            f"--after {format_position(page.next_after)}",
            err=True,
        )


def _print_list(
    topics: Topics,
    page: DeadLetterPage,
    redriven: set[tuple[int, int]],
    rows: list[StoredDeadLetter],
) -> None:
    from rich.table import Table  # noqa: PLC0415 - printing only

    table = Table(
        title=f"{topics.dlq} ({len(page.summaries)} of {page.total})", title_justify="left"
    )
    for column in ("partition:offset", "failed at", "reason", "consumer", "source", "tries"):
        table.add_column(column, no_wrap=True)
    table.add_column("redriven")
    table.add_column("detail")
    for r in page.summaries:
        table.add_row(
            f"{r.partition}:{r.offset}",
            _plain(r.failed_at[:19].replace("T", " ")),
            _plain(r.reason),
            _plain(r.consumer),
            _plain(r.source),
            str(r.failures),
            "yes" if r.position in redriven else "",
            _plain(r.detail[:120]),
        )
    console = _console()
    console.print(table)
    if rows:
        kept = Table(
            title=f"core.dead_letters: refused by the broker even as a reference ({len(rows)})",
            title_justify="left",
        )
        for column in ("id", "failed at", "reason", "consumer", "source", "refusal"):
            kept.add_column(column, no_wrap=column != "refusal")
        for row in rows:
            kept.add_row(
                str(row.id),
                row.failed_at.isoformat()[:19].replace("T", " "),
                _plain(row.reason),
                _plain(row.consumer),
                _plain(row.source),
                _plain(row.refusal[:120]),
            )
        console.print(kept)


@app.command()
def show(
    *,
    topic: TopicOption,
    offset: Annotated[
        int | None, typer.Option(min=0, help="Offset of the dead letter on T.dlq.")
    ] = None,
    partition: Annotated[int, typer.Option(min=0, help="Its partition.")] = 0,
    stored_id: Annotated[
        int | None,
        typer.Option("--stored", min=1, help="Instead: the id of a row of core.dead_letters."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """One dead letter: headers, failure history, the original decoded.

    When the original does not decode: why not, and its first bytes."""
    if (offset is None) == (stored_id is None):
        raise typer.BadParameter("give exactly one of --offset and --stored")
    from spectral.dlq.records import Topics, read_dead_letter  # noqa: PLC0415 - see list_
    from spectral.dlq.repository import RedriveRepository  # noqa: PLC0415
    from spectral.dlq.store import stored_one  # noqa: PLC0415

    topics = Topics.of(topic)

    async def load(
        current: Settings, bootstrap: str, conn: asyncpg.Connection
    ) -> dict[str, Any] | None:
        if stored_id is not None:
            found = await stored_one(conn, topics.source, stored_id)
            return None if found is None else _stored_full(found)
        assert offset is not None  # noqa: S101 - checked above
        record = await read_dead_letter(current, bootstrap, topics.dlq, partition, offset)
        if record is None:
            return None
        redriven = await RedriveRepository(conn).redriven(topics.dlq, [(partition, offset)])
        return record.full_json(redriven=(partition, offset) in redriven)

    view = _with_connection(load)
    if view is None:
        where = (
            f"core.dead_letters id {stored_id} of {topics.source}"
            if stored_id is not None
            else f"{topics.dlq}:{partition}:{offset}"
        )
        fail(f"no dead letter at {where}")
    if as_json:
        _echo_json(view)
        return
    _print_view(view)


def _print_view(view: dict[str, Any]) -> None:
    from rich.table import Table  # noqa: PLC0415 - printing only
    from rich.text import Text  # noqa: PLC0415

    console = _console()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for name in ("reason", "detail", "consumer", "failed_at", "source", "key", "bytes"):
        facts.add_row(name, _plain(view[name]))
    if "refusal" in view:
        facts.add_row("kept in", f"core.dead_letters (id {view['id']})")
        facts.add_row("refused by the broker", _plain(view["refusal"]))
    else:
        facts.add_row("redriven", "yes" if view["redriven"] else "no")
    console.print(facts)
    headers = Table(title="headers", title_justify="left")
    headers.add_column("name", no_wrap=True)
    headers.add_column("value")
    for name, value in view["headers"].items():
        headers.add_row(_plain(name), _plain(value))
    console.print(headers)
    history = Table(title="history (oldest first)", title_justify="left")
    for column in ("failed_at", "reason", "consumer", "source", "detail"):
        history.add_column(column)
    for item in view["history"]:
        history.add_row(
            *(_plain(item.get(c, "")) for c in ("failed_at", "reason", "consumer", "source")),
            _plain(str(item.get("detail", ""))[:200]),
        )
    console.print(history)
    if view["envelope"] is not None:
        console.print(Text("original (decoded)", style="bold"))
        console.print_json(json.dumps(view["envelope"]))
    else:
        console.print(Text.assemble(("original does not decode: ", "bold"), view["undecodable"]))
        console.print(_plain(view["value_preview"]))


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
    from spectral.dlq.redrive import redrive  # noqa: PLC0415 - see list_

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
        f"{report.dlq_topic}: {verb} {report.total} of {report.examined} dead letters "
        f"to {report.topic}; skipped: {skipped}"
    )
    if report.truncated:
        typer.echo(f"  (the first {len(report.redriven)} listed)")
    for r in report.redriven:
        target = "" if r.partition is None else f" -> {report.topic}:{r.partition}:{r.offset}"
        typer.echo(f"  {r.dlq_partition}:{r.dlq_offset} {r.reason}{target}")
    for refused in report.refused:
        typer.echo(f"  {refused.dlq_partition}:{refused.dlq_offset} refused: {refused.why}")
