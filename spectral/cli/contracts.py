"""`spectral contracts export [--check]`, `spectral contracts asyncapi`, `spectral contracts hash
FILE|-` and `spectral contracts check FILE|-`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from contracts import (
    DecodeError,
    EventRegistry,
    render_event_schemas,
    schema_violations,
    snapshot_hash_of_json,
)
from contracts.asyncapi import ASYNCAPI_FILE_NAME, TopicSettings, document_text
from contracts.spec_tables import fill_tables, readme_tables
from spectral import resources
from spectral.cli.deployments import deployments, receivers, what_each_reads
from spectral.kafka.topology import TopicPolicy, declared_topics
from spectral.plugins import installed_event_sources, installed_registry, registry_of
from spectral.settings import load_settings

app = typer.Typer(
    help="Wire contracts: JSON Schemas, AsyncAPI, the snapshot hash, checking records.",
    no_args_is_help=True,
)

SOURCE_SCHEMA_DIR = resources.source_event_schemas()
"""schemas/events of the source checkout; None when spectral runs from an installed wheel."""
DEFAULT_SCHEMA_DIR = SOURCE_SCHEMA_DIR or Path(str(resources.event_schemas()))
"""Where --check compares by default: the checkout's files, else the ones the wheel ships."""

SPEC_FILE_NAME = "README.md"
"""The spec beside the schemas; export fills its generated tables (contracts.spec_tables)."""
_NOT_SCHEMAS = frozenset({ASYNCAPI_FILE_NAME, SPEC_FILE_NAME})

DOCUMENTED_BROKERS = 3
"""The cluster size the AsyncAPI bindings show (replication is min(3, brokers))."""


def own_registry() -> EventRegistry:
    """The event types spectral's own distribution registers (its built-in features')."""
    return registry_of(source for source in installed_event_sources() if source.own)


def declared_topic_settings(events: EventRegistry | None = None) -> dict[str, TopicSettings]:
    """The settings ``spectral topics apply`` declares, by topic name without prefix."""
    names = (events or own_registry()).event_types()
    declared = declared_topics(names, "", TopicPolicy(), DOCUMENTED_BROKERS)
    return {t.name: TopicSettings(t.partitions, t.replication_factor, t.config) for t in declared}


def _receivers(events: EventRegistry, *, own: bool) -> dict[str, tuple[str, ...]]:
    """Which deployments read ``events`` (spectral's own, or the plugins'), each handler built
    to ask and never run."""
    names = [name for name in deployments().names() if deployments().is_own(name) == own]
    reads = asyncio.run(what_each_reads(load_settings(), "", names))
    return receivers(reads, events.event_types())


def published_files() -> dict[str, str]:
    """File name -> text of everything ``export`` writes: the JSON Schemas and AsyncAPI of
    spectral's own event types, received by its own deployments."""
    events = own_registry()
    return _files(events, _receivers(events, own=True))


def _files(events: EventRegistry, receivers: dict[str, tuple[str, ...]]) -> dict[str, str]:
    files = render_event_schemas(events)
    files[ASYNCAPI_FILE_NAME] = document_text(
        events,
        receivers=receivers,
        topics=declared_topic_settings(events),
    )
    return files


def plugin_registry(plugin: str) -> EventRegistry:
    """The event types of the installed plugin ``plugin`` (exit 2 when none registers events)."""
    sources = {source.plugin: source for source in installed_event_sources()}
    if plugin not in sources:
        known = ", ".join(sorted(sources)) or "none is installed"
        typer.echo(f"error: no plugin named {plugin!r} registers events; known: {known}", err=True)
        raise typer.Exit(2)
    return EventRegistry(sources[plugin].specs)


def plugin_files(plugin: str) -> dict[str, str]:
    """What ``export --plugin NAME`` writes: the JSON Schemas of the plugin's event types and
    the AsyncAPI document of their topics, received by the installed deployments that read
    them (each handler is built to ask, never run)."""
    events = plugin_registry(plugin)
    return _files(events, _receivers(events, own=False))


@app.command()
def export(
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 when a checked-in file differs."),
    ] = False,
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Where the schemas live (default: schemas/events of the source checkout).",
            show_default=False,
        ),
    ] = None,
    plugin: Annotated[
        str | None,
        typer.Option(
            "--plugin",
            help="An installed plugin's event types instead of spectral's (needs --dir).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write schemas/events/<event_type>.v<schema_version>.json for every registered type, the
    AsyncAPI 3 document of every topic (asyncapi.json) and the generated tables of the spec
    beside them (README.md), all from the registry.

    Refuses (exit 1) a model change that is not additive against the checked-in schemas.
    Writes only into a source checkout or --dir, never into an installed package (exit 2).
    With --plugin NAME: the same for that plugin's event types, into (or checked against) --dir.
    """
    if plugin is not None and directory is None:
        typer.echo("error: --plugin NAME needs --dir DIR (the plugin's schema folder)", err=True)
        raise typer.Exit(2)
    if directory is None:
        if SOURCE_SCHEMA_DIR is None and not check:
            typer.echo(
                "error: spectral runs from an installed package, not a source checkout: pass "
                "--dir DIR to write the schemas somewhere (or --check to compare)",
                err=True,
            )
            raise typer.Exit(2)
        directory = DEFAULT_SCHEMA_DIR
    rendered = published_files() if plugin is None else plugin_files(plugin)
    checked_in = {path.name: path.read_text("utf-8") for path in sorted(directory.glob("*.json"))}
    _add_spec(directory, plugin, rendered, checked_in)
    schemas = {name: text for name, text in checked_in.items() if name not in _NOT_SCHEMAS}
    current = {name: text for name, text in rendered.items() if name not in _NOT_SCHEMAS}
    violations = schema_violations(current, schemas)
    if violations:
        typer.echo("not additive against the checked-in schemas:", err=True)
        for violation in violations:
            typer.echo(f"  {violation}", err=True)
        typer.echo("add a new event type instead of breaking this one", err=True)
        raise typer.Exit(1)
    stale = sorted(name for name, text in rendered.items() if checked_in.get(name) != text)
    if check:
        for name in stale:
            typer.echo(f"out of date: {directory / name}", err=True)
        if stale:
            typer.echo("run `spectral contracts export` and commit the result", err=True)
            raise typer.Exit(1)
        typer.echo(f"{len(rendered)} files up to date")
        return
    directory.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (directory / name).write_text(rendered[name], "utf-8")
        typer.echo(f"wrote {directory / name}")
    typer.echo(f"{len(rendered)} files, {len(stale)} written")


def _add_spec(
    directory: Path, plugin: str | None, rendered: dict[str, str], checked_in: dict[str, str]
) -> None:
    """The spec beside the schemas, as checked in and with its generated tables filled (a
    plugin's folder may have no spec, or a spec with only some of the tables)."""
    spec = directory / SPEC_FILE_NAME
    if spec.is_file():
        checked_in[SPEC_FILE_NAME] = spec.read_text("utf-8")
        events = own_registry() if plugin is None else plugin_registry(plugin)
        rendered[SPEC_FILE_NAME] = fill_tables(checked_in[SPEC_FILE_NAME], readme_tables(events))


@app.command()
def asyncapi(
    plugin: Annotated[
        str | None,
        typer.Option(
            "--plugin",
            help="An installed plugin's event types instead of spectral's.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Print the AsyncAPI 3 document of every topic (the asyncapi.json export writes) to stdout.

    Works from an installed package too: nothing is read from or written to a checkout.
    """
    files = published_files() if plugin is None else plugin_files(plugin)
    sys.stdout.write(files[ASYNCAPI_FILE_NAME])


def _read(source: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        typer.echo(f"cannot read {source}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None


@app.command(name="hash")
def hash_command(
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="A JSON object; - reads stdin.")],
) -> None:
    """Print the snapshot_hash of the failure-cluster payload in FILE, and nothing else.

    The payload is checked as a consumer checks it (its snapshot_hash may be missing or
    anything): a payload the contract refuses exits 1 with every problem on stderr.
    """
    data = _read(source)
    try:
        digest = snapshot_hash_of_json(data)
    except DecodeError as exc:
        typer.echo(f"{exc.reason.value}: {exc.detail}", err=True)
        raise typer.Exit(1) from None
    typer.echo(digest)


@app.command()
def check(
    source: Annotated[
        str, typer.Argument(metavar="FILE|-", help="One record value (an envelope); - reads stdin.")
    ],
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="The Kafka record key (UTF-8) to check as well. Without it the key the record "
            "must carry is printed.",
        ),
    ] = None,
    lines: Annotated[
        bool, typer.Option("--lines", help="FILE holds one envelope per line (JSON lines).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per record.")] = False,
) -> None:
    """Check whole records the way the consumer reads them: size, JSON, envelope, payload,
    U+0000, snapshot_hash, idempotency_key and (with --key) the record key.

    Prints one line per record, ``ok`` or ``refused`` with the reason; exits 1 when any record
    is refused, 2 when FILE cannot be read.
    """
    data = _read(source)
    values = [line for line in data.splitlines() if line.strip()] if lines else [data]
    if not values:
        typer.echo(f"no records in {source}: nothing was checked", err=True)
        raise typer.Exit(1)
    refused = 0
    for number, value in enumerate(values, start=1):
        verdict = _verdict(value, None if key is None else key.encode())
        refused += verdict["verdict"] == "refused"
        if as_json:
            typer.echo(json.dumps({"record": number, **verdict}, ensure_ascii=False))
        else:
            typer.echo(_line(number if lines else None, verdict))
    if refused:
        raise typer.Exit(1)


def _verdict(value: bytes, key: bytes | None) -> dict[str, Any]:
    events = installed_registry()  # spectral's event types and the installed plugins'
    try:
        envelope = events.decode(value)
    except DecodeError as exc:
        return {"verdict": "refused", "reason": exc.reason.value, "detail": exc.detail}
    record_key = events.record_key(envelope)
    out: dict[str, Any] = {
        "event_type": envelope.event_type,
        "idempotency_key": envelope.idempotency_key,
        "record_key": record_key.decode(),
        "topic": envelope.event_type,
    }
    if key is not None:
        try:
            events.check_record_key(envelope, key)
        except DecodeError as exc:
            return {"verdict": "refused", "reason": exc.reason.value, "detail": exc.detail, **out}
    return {"verdict": "ok", "key_checked": key is not None, **out}


def _line(number: int | None, verdict: dict[str, Any]) -> str:
    where = f"record {number}: " if number is not None else ""
    if verdict["verdict"] == "refused":
        return f"{where}refused {verdict['reason']}: {verdict['detail']}"
    key_note = "" if verdict["key_checked"] else " (must be the record key)"
    return (
        f"{where}ok {verdict['event_type']} idempotency_key={verdict['idempotency_key']} "
        f"record_key={verdict['record_key']}{key_note}"
    )
