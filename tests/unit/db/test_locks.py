"""One advisory-lock key space (spectral/db/locks.py): every lock class the SQL spells out is a
registered one, and no code spells a registered class as a number of its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

from spectral.db.locks import MIGRATION_KEY, LockClass

ROOT: Final = Path(__file__).resolve().parents[3]
CODE: Final = ("spectral", "contracts", "producers", "consumers")
REGISTRY: Final = ROOT / "spectral" / "db" / "locks.py"
_CALL: Final = re.compile(r"pg_(?:try_)?advisory_(?:xact_)?(?:un)?lock(?:_shared)?\s*\(\s*([^,)]+)")


def _sql_files() -> list[Path]:
    return sorted(p for top in (*CODE, "schemas") for p in (ROOT / top).rglob("*.sql"))


def test_every_lock_class_the_sql_spells_out_is_registered() -> None:
    literals = [
        (path.relative_to(ROOT), match.group(1).strip())
        for path in _sql_files()
        for match in _CALL.finditer(path.read_text("utf-8"))
        if match.group(1).strip().isdigit()
    ]
    assert literals, "the scan found no literal lock class (the doorbell's migration has some)"
    registered = {int(c) for c in LockClass}
    assert [(str(p), v) for p, v in literals if int(v) not in registered] == []


def test_no_code_spells_a_registered_class_as_its_own_number() -> None:
    registered = {int(c) for c in LockClass} | {MIGRATION_KEY}
    spelled = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for top in CODE
        for path in sorted((ROOT / top).rglob("*.py"))
        if path != REGISTRY
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value in registered
    ]
    assert spelled == []


def test_the_classes_are_distinct_ints() -> None:
    values = [int(c) for c in LockClass]
    assert len(set(values)) == len(values)
    assert all(-(2**31) <= v < 2**31 for v in values)  # pg_advisory_*(int, int)
