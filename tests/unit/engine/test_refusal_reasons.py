"""One set of dead-letter reasons (contracts.RefusalReason): the spec's refusal table lists each
once, the metrics' label set is it, and no code spells a reason as a string of its own."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

from contracts import DecodeReason, RefusalReason
from contracts.dead_letters import DEAD_LETTER_REASONS, REFUSALS

ROOT: Final = Path(__file__).resolve().parents[3]
DEFINED_IN: Final = {ROOT / "contracts" / "errors.py", ROOT / "contracts" / "dead_letters.py"}


def test_every_reason_has_its_refusal_and_every_refusal_its_reason() -> None:
    assert {refusal.reason for refusal in REFUSALS} == set(RefusalReason)
    assert frozenset(RefusalReason) == DEAD_LETTER_REASONS
    assert DecodeReason is RefusalReason  # the extension API's name for them


def test_no_code_spells_a_reason_as_a_string_of_its_own() -> None:
    values = {reason.value for reason in RefusalReason}
    spelled = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for top in ("spectral", "contracts", "producers", "consumers")
        for path in sorted((ROOT / top).rglob("*.py"))
        if path not in DEFINED_IN
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Constant) and node.value in values
    ]
    assert spelled == []
