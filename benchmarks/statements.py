"""The product's own SQL, for the baselines and peers that must do the same database work."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from consumers.rule_candidates.repository import QUERIES as PROJECTION_QUERIES
from spectral.db.queries import load_queries

ENGINE_SQL: Final = load_queries(
    Path(__file__).resolve().parents[1] / "spectral" / "engine" / "queries.sql"
)
"""The consumer engine's statements (claim_keys, mark_stale, forget)."""
PROJECTION_SQL: Final = load_queries(PROJECTION_QUERIES)
"""The rule-candidates projection's statements (upsert_snapshots, ...)."""
