"""Data problems the wire contract lets through but the table cannot hold (pure, no I/O).

The contracts already refuse bad JSON, bad types, bad hashes and keys, naive timestamps,
first_observed_at after last_observed_at, a failure_count below 1 and over-bound bundles. What is
left is what PostgreSQL would refuse — and a refusal inside the batch's one statement would fail
every batch-mate:

* ``failure_count_range``: the count does not fit the ``int`` column of ADR-057 D3 (the
  contract allows integers up to 2**53 - 1);
* ``nul_character``: a ``\\u0000`` in a string — neither ``text`` nor ``jsonb`` can store it.

A problem found here turns the delivery into ``HandlerResult.rejected`` (dead-lettered with the
reason) without touching its batch-mates.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Final

INT4_MAX: Final = 2**31 - 1
_NUL_ESCAPE: Final = b"\\u0000"


class Problem(StrEnum):
    FAILURE_COUNT_RANGE = "failure_count_range"
    NUL_CHARACTER = "nul_character"


def check_snapshot(failure_count: int, raw: bytes) -> tuple[Problem, str] | None:
    """The first problem of one snapshot as ``(problem, detail)``, or None when it can be stored."""
    if failure_count > INT4_MAX:
        return Problem.FAILURE_COUNT_RANGE, f"failure_count {failure_count} exceeds {INT4_MAX}"
    # The escape is rare; only then is the record parsed again to tell a real NUL from an
    # escaped backslash followed by "u0000".
    if _NUL_ESCAPE in raw and _has_nul(json.loads(raw)):
        return Problem.NUL_CHARACTER, "a string contains U+0000, which PostgreSQL cannot store"
    return None


def _has_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in k or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False
