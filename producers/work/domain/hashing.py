"""Canonical text and content hashes of the JSON values the work domain stores.

Ledger payloads and document contents are hashed over their canonical text (keys sorted, no
insignificant whitespace, UTF-8, non-ASCII unescaped), so a hash recomputed from the stored
JSON later — by ``spectral threads history --verify`` or by anyone with the rows — matches.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def content_hash(value: Any) -> str:
    """sha256 of the canonical text, as 64 lowercase hex digits."""
    return text_hash(canonical_text(value))


def text_hash(text: str) -> str:
    """``content_hash`` of a value whose canonical text is ``text`` (no second serialisation)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
