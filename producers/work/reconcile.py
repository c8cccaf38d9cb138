"""Reconciling a provider's billing export with the spend ledger (``spectral work reconcile``).

The export is a file of per-call usage keyed by the ``Idempotency-Key`` spectral sends with each
call (``{work_item_id}:{attempt}``), in one of two formats:

* **CSV** (``.csv``, or ``--format csv``): UTF-8, a header row, comma-separated; columns
  ``idempotency_key`` (or ``call_id``) and ``tokens`` are required, ``cost`` is optional; other
  columns are ignored.
* **JSON lines** (``.jsonl``/``.ndjson``, or ``--format jsonl``): one JSON object per line with
  the same fields (``tokens`` an integer, ``cost`` a number or a decimal string).

Each line is read on its own: a line that is not UTF-8, longer than ``MAX_LINE_BYTES``, not a
JSON object, or without a valid key or token count is an *invalid row* (reported with its line
number, never guessed at); a file without the required columns is refused whole.

Compared with ``work.spend`` (one row per attempt: reserved, then settled from the usage the
answer reported):

* ``unknown_to_ledger`` — billed calls spectral has no attempt for;
* ``not_billed`` — calls the ledger settled (in the window) that the export does not bill;
* ``amount_differs`` — billed tokens (or cost, when the export has it) other than settled;
* ``billed_unknown_outcome`` — billed calls whose outcome spectral does not know (the worker
  died or the call timed out after the request left): the provider did them;
* ``duplicates`` — keys billed more than once.

The window of ``not_billed`` is ``--since``/``--until`` (reservation time), by default the
span of reservation times of the billed calls the ledger knows. Drift is also summed per model
route and per org. Any discrepancy or invalid row makes the command exit 1.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Final
from uuid import UUID

from producers.work.domain.types import Conn
from spectral.db.queries import load_queries
from spectral.errors import PermanentError

_SQL = load_queries(Path(__file__).with_name("reconcile.sql"))

MAX_LINE_BYTES: Final = 1 << 20
"""A line longer than this (1 MiB) is an invalid row, read past without holding it."""
MAX_INVALID_SHOWN: Final = 20
KEY_FIELDS: Final = ("idempotency_key", "call_id")


class ExportFormat(StrEnum):
    CSV = "csv"
    JSONL = "jsonl"

    @classmethod
    def of(cls, path: Path) -> ExportFormat:
        return cls.CSV if path.suffix.lower() == ".csv" else cls.JSONL


class ExportError(PermanentError, ValueError):
    """The file as a whole cannot be read as an export (no such file, no required column)."""


@dataclass(frozen=True)
class Billed:
    key: str
    line: int
    tokens: int
    cost: Decimal | None


@dataclass
class Export:
    rows: list[Billed] = field(default_factory=list)
    invalid: list[tuple[int, str]] = field(default_factory=list)
    """(line number, why) of the rows that could not be read."""


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, str | None, str]]:
    """(line number, text or None, why not) of each physical line, each decoded on its own."""
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield number, None, f"longer than {MAX_LINE_BYTES:,} bytes"
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield number, None, f"not UTF-8 (byte {exc.start})"
            continue
        if "\x00" in text:
            yield number, None, "contains a NUL character"
            continue
        yield number, text.rstrip("\r\n"), ""


def _tokens(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        tokens = value
    elif isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 18:  # noqa: PLR2004 - fits a bigint
        tokens = int(value.strip())
    else:
        raise ValueError(f"tokens {str(value)[:40]!r} is not an integer")
    if not 0 <= tokens < 2**62:
        raise ValueError("tokens out of range")
    return tokens


def _cost(value: Any) -> Decimal | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("cost must be a number")  # noqa: TRY004 - a row's reason, not a bug
    try:
        cost = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"cost {str(value)[:40]!r} is not a number") from None
    if not cost.is_finite() or cost < 0 or cost.adjusted() > 15:  # noqa: PLR2004 - numeric(24, 9)
        raise ValueError("cost out of range")
    return cost


def _row(number: int, record: dict[str, Any]) -> Billed:
    key = next((record[f] for f in KEY_FIELDS if record.get(f) not in (None, "")), None)
    if not isinstance(key, str) or not 1 <= len(key) <= 200:  # noqa: PLR2004 - a key's bound
        raise ValueError("no idempotency_key (or call_id)")
    if "tokens" not in record or record["tokens"] in (None, ""):
        raise ValueError("no tokens")
    return Billed(key.strip(), number, _tokens(record["tokens"]), _cost(record.get("cost")))


def read_export(stream: IO[bytes], fmt: ExportFormat) -> Export:
    """Every row of the export, the invalid ones apart; ExportError when the file is not an
    export at all (CSV without the required columns)."""
    export = Export()
    lines = _lines(stream)
    if fmt is ExportFormat.CSV:
        _read_csv(lines, export)
    else:
        for number, text, why in lines:
            if text is None:
                export.invalid.append((number, why))
                continue
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except (ValueError, RecursionError) as exc:
                export.invalid.append((number, f"not JSON: {exc}"[:200]))
                continue
            if not isinstance(record, dict):
                export.invalid.append((number, "not a JSON object"))
                continue
            try:
                export.rows.append(_row(number, record))
            except ValueError as exc:
                export.invalid.append((number, str(exc)[:200]))
    return export


def _read_csv(lines: Iterator[tuple[int, str | None, str]], export: Export) -> None:  # noqa: C901 - a branch per kind of bad line
    header: list[str] | None = None
    for number, text, why in lines:
        if text is None:
            if header is None:
                raise ExportError(f"the header (line {number}) is {why}")
            export.invalid.append((number, why))
            continue
        if not text.strip():
            continue
        try:
            cells = next(csv.reader(io.StringIO(text)))
        except (csv.Error, StopIteration) as exc:
            export.invalid.append((number, f"not CSV: {exc}"[:200]))
            continue
        if header is None:
            header = [c.strip().lower() for c in cells]
            if not any(f in header for f in KEY_FIELDS) or "tokens" not in header:
                raise ExportError(
                    "the CSV header needs an idempotency_key (or call_id) and a tokens column; "
                    f"it has {', '.join(header)[:200]!r}"
                )
            continue
        if len(cells) != len(header):
            export.invalid.append((number, f"{len(cells)} cells for {len(header)} columns"))
            continue
        try:
            export.rows.append(_row(number, dict(zip(header, cells, strict=True))))
        except ValueError as exc:
            export.invalid.append((number, str(exc)[:200]))
    if header is None:
        raise ExportError("the file is empty: no CSV header")


def parse_key(key: str) -> tuple[UUID, int] | None:
    """The (work item, attempt) an Idempotency-Key names, None when it is not one of ours."""
    item, sep, attempt = key.rpartition(":")
    if not sep or not attempt.isdigit() or len(attempt) > 9:  # noqa: PLR2004 - an integer
        return None
    try:
        return UUID(item), int(attempt)
    except ValueError:
        return None


@dataclass
class Drift:
    """Billed against recorded, for one model route or org."""

    billed_tokens: int = 0
    recorded_tokens: int = 0
    billed_cost: Decimal = Decimal(0)
    recorded_cost: Decimal = Decimal(0)

    def as_json(self) -> dict[str, Any]:
        return {
            "billed_tokens": self.billed_tokens,
            "recorded_tokens": self.recorded_tokens,
            "token_drift": self.billed_tokens - self.recorded_tokens,
            "billed_cost": str(self.billed_cost),
            "recorded_cost": str(self.recorded_cost),
            "cost_drift": str(self.billed_cost - self.recorded_cost),
        }


@dataclass
class Reconciliation:
    rows: int = 0
    matched: int = 0
    window: tuple[datetime, datetime] | None = None
    unknown_to_ledger: list[dict[str, Any]] = field(default_factory=list)
    not_billed: list[dict[str, Any]] = field(default_factory=list)
    amount_differs: list[dict[str, Any]] = field(default_factory=list)
    billed_unknown_outcome: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    invalid: list[tuple[int, str]] = field(default_factory=list)
    by_route: dict[str, Drift] = field(default_factory=lambda: defaultdict(Drift))
    by_org: dict[str, Drift] = field(default_factory=lambda: defaultdict(Drift))

    @property
    def discrepancies(self) -> int:
        return (
            len(self.unknown_to_ledger)
            + len(self.not_billed)
            + len(self.amount_differs)
            + len(self.billed_unknown_outcome)
            + len(self.duplicates)
        )

    @property
    def clean(self) -> bool:
        return self.discrepancies == 0 and not self.invalid

    def as_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "rows": self.rows,
            "matched": self.matched,
            "discrepancies": self.discrepancies,
            "window": [at.isoformat() for at in self.window] if self.window else None,
            "unknown_to_ledger": self.unknown_to_ledger,
            "not_billed": self.not_billed,
            "amount_differs": self.amount_differs,
            "billed_unknown_outcome": self.billed_unknown_outcome,
            "duplicates": self.duplicates,
            "invalid_rows": len(self.invalid),
            "invalid": [
                {"line": line, "why": why} for line, why in self.invalid[:MAX_INVALID_SHOWN]
            ],
            "by_route": {k: v.as_json() for k, v in sorted(self.by_route.items())},
            "by_org": {k: v.as_json() for k, v in sorted(self.by_org.items())},
        }


def _label(value: str | None) -> str:
    return value if value is not None else "none"


async def reconcile(  # noqa: C901 - one pass per category
    conn: Conn,
    export: Export,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Reconciliation:
    """Compare ``export`` with the spend ledger (read only)."""
    result = Reconciliation(rows=len(export.rows), invalid=list(export.invalid))
    counts = Counter(row.key for row in export.rows)
    result.duplicates = sorted(key for key, n in counts.items() if n > 1)
    billed: dict[tuple[UUID, int], Billed] = {}
    for row in export.rows:
        parsed = parse_key(row.key)
        if parsed is None:
            result.unknown_to_ledger.append(
                {"key": row.key, "line": row.line, "tokens": row.tokens}
            )
            continue
        billed.setdefault(parsed, row)
    keys = sorted(billed)
    known = {
        (r["work_item_id"], r["attempt"]): r
        for r in await conn.fetch(_SQL["spend_of"], [k[0] for k in keys], [k[1] for k in keys])
    }
    for key in keys:
        row = billed[key]
        spend = known.get(key)
        if spend is None or spend["state"] == "released":
            result.unknown_to_ledger.append(
                {"key": row.key, "line": row.line, "tokens": row.tokens}
            )
            continue
        result.matched += 1
        _drift(result, row, spend)
        entry = {
            "key": row.key,
            "model": spend["model"],
            "org_id": spend["org_id"],
            "billed_tokens": row.tokens,
            "recorded_tokens": spend["tokens"],
        }
        if spend["state"] != "settled":
            result.billed_unknown_outcome.append({**entry, "state": spend["state"]})
        elif row.tokens != spend["tokens"] or (
            row.cost is not None
            and row.cost.quantize(Decimal("1e-9")) != spend["cost"].quantize(Decimal("1e-9"))
        ):
            result.amount_differs.append(
                {
                    **entry,
                    "billed_cost": str(row.cost) if row.cost is not None else None,
                    "recorded_cost": str(spend["cost"]),
                }
            )
    times = [r["reserved_at"] for r in known.values()]
    start = since or (min(times) if times else None)
    end = until or (max(times) if times else None)
    if start is not None and end is not None:
        result.window = (start, end)
        for spend in await conn.fetch(_SQL["settled_between"], start, end):
            if (spend["work_item_id"], spend["attempt"]) in billed:
                continue
            result.not_billed.append(
                {
                    "key": f"{spend['work_item_id']}:{spend['attempt']}",
                    "model": spend["model"],
                    "org_id": spend["org_id"],
                    "recorded_tokens": spend["tokens"],
                    "settled_at": spend["settled_at"].isoformat(),
                }
            )
            for drift in (
                result.by_route[_label(spend["model"])],
                result.by_org[_label(spend["org_id"])],
            ):
                drift.recorded_tokens += spend["tokens"]
                drift.recorded_cost += spend["cost"]
    return result


def _drift(result: Reconciliation, row: Billed, spend: Any) -> None:
    recorded = spend["tokens"] if spend["tokens"] is not None else spend["reserved_tokens"]
    recorded_cost = spend["cost"] if spend["cost"] is not None else spend["reserved_cost"]
    for drift in (result.by_route[_label(spend["model"])], result.by_org[_label(spend["org_id"])]):
        drift.billed_tokens += row.tokens
        drift.recorded_tokens += recorded
        drift.billed_cost += row.cost if row.cost is not None else recorded_cost
        drift.recorded_cost += recorded_cost
