"""Evidence selection: the (at most) 10 most representative failures of a cluster, chosen
deterministically. Pure: no I/O.

The rule:

1. Coverage first — one failure per distinct ``summary``, summaries taken from the most frequent
   in the cluster to the least (ties: summary text in code point order); each summary is
   represented by its most recent failure (ties: smallest failure_id, code point order).
2. Then recency — the remaining slots take the most recent failures not yet chosen
   (observed_at descending, then failure_id ascending).

The bundle lists them in that selection order. The same failures always give the same bundle,
so the snapshot hash only changes when the cluster does.

The repository fetches only the candidates this rule can pick (per cluster: the representatives
of the ``limit`` most frequent summaries, and the ``limit`` most recent failures), with
``summary_count`` attached to each; this function makes the choice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

EVIDENCE_LIMIT = 10


@dataclass(frozen=True, slots=True)
class EvidenceCandidate:
    failure_id: str
    observed_at: datetime
    summary: str
    summary_count: int


def select_evidence(
    candidates: Iterable[EvidenceCandidate], limit: int = EVIDENCE_LIMIT
) -> tuple[EvidenceCandidate, ...]:
    unique = {c.failure_id: c for c in candidates}
    # observed_at descending, then failure_id ascending (two stable sorts: exact, no float keys).
    by_recency = sorted(unique.values(), key=lambda c: c.failure_id)
    by_recency.sort(key=lambda c: c.observed_at, reverse=True)
    representative: dict[str, EvidenceCandidate] = {}
    for candidate in by_recency:
        representative.setdefault(candidate.summary, candidate)
    ranked_summaries = sorted(representative, key=lambda s: (-representative[s].summary_count, s))
    chosen: list[EvidenceCandidate] = [representative[s] for s in ranked_summaries[:limit]]
    taken = {c.failure_id for c in chosen}
    for candidate in by_recency:
        if len(chosen) >= limit:
            break
        if candidate.failure_id not in taken:
            chosen.append(candidate)
            taken.add(candidate.failure_id)
    return tuple(chosen)
