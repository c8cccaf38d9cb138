"""Characters that change or hide text without being seen are shown as marks, never rendered."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given
from hypothesis import strategies as st
from markupsafe import escape

from spectral.api.text import hidden_characters, hidden_in, is_hidden, reveal

MARK = re.compile(r'<span class="hidden-char" title="[^"<>]*">⟨U\+[0-9A-F]{4,6}⟩</span>')
SPOOFS = ["\u202e", "\u202d", "\u2066", "\u2069", "\u200b", "\u200d", "\ufeff", "\u2028", "\x07"]


def test_bidirectional_and_zero_width_characters_are_hidden_ones() -> None:
    for char in SPOOFS:
        assert is_hidden(char), f"U+{ord(char):04X}"
    for char in "a\t\n\r é漢😀 ":
        assert not is_hidden(char), repr(char)


def test_a_spoofed_name_is_shown_with_its_marks() -> None:
    shown = str(reveal("invoice\u202efdp.exe"))
    assert "\u202e" not in shown
    assert shown == (
        'invoice<span class="hidden-char" title="RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>fdp.exe'
    )
    assert hidden_in("a\u200bb\u200bc\u202e") == ["U+200B", "U+202E"]


@given(st.text())
def test_no_hidden_character_ever_reaches_the_page(text: str) -> None:
    shown = str(reveal(text))
    assert not any(is_hidden(char) for char in shown)
    for code_point in hidden_in(text):
        assert f"⟨{code_point}⟩" in shown
    if not hidden_in(text):
        assert shown == str(escape(text))  # ordinary text is only escaped


@given(st.text())
def test_markup_in_text_stays_escaped(text: str) -> None:
    shown = MARK.sub("", str(reveal("<b>" + text)))
    assert "<" not in shown
    assert shown.startswith("&lt;b&gt;")


def test_the_api_flags_where_hidden_characters_are() -> None:
    found = list(
        hidden_characters({"notes": "ok", "summary": "x\u202ey\ufeff", "count": 3, "none": None})
    )
    assert found == [{"location": "summary", "code_points": ["U+202E", "U+FEFF"]}]


def test_every_format_character_is_hidden() -> None:
    for code in range(0x110000):
        char = chr(code)
        if unicodedata.category(char) == "Cf":
            assert is_hidden(char), f"U+{code:04X}"
