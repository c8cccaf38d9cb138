"""Evidence selection: coverage of distinct summaries first, then recency; deterministic."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

from producers.clusters.evidence import EvidenceCandidate, select_evidence

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def failures(spec: list[tuple[str, str, int]]) -> list[EvidenceCandidate]:
    """(failure_id, summary, minutes after T0) -> candidates with their summary counts."""
    counts = Counter(summary for _, summary, _ in spec)
    return [
        EvidenceCandidate(fid, T0 + timedelta(minutes=m), summary, counts[summary])
        for fid, summary, m in spec
    ]


def ids(selection: tuple[EvidenceCandidate, ...]) -> list[str]:
    return [c.failure_id for c in selection]


def test_one_per_summary_by_frequency_then_most_recent() -> None:
    chosen = select_evidence(
        failures(
            [
                ("a1", "A", 1),
                ("a2", "A", 5),
                ("a3", "A", 3),
                ("b1", "B", 9),
                ("b2", "B", 2),
                ("c1", "C", 7),
            ]
        ),
        limit=4,
    )
    # A (3 failures) then B (2) then C (1), each by its most recent failure; then recency.
    assert ids(chosen) == ["a2", "b1", "c1", "a3"]


def test_ties_break_by_code_point_order() -> None:
    chosen = select_evidence(
        failures([("x2", "Zeta", 1), ("x1", "Alpha", 1), ("x3", "alpha", 1), ("x0", "Alpha", 1)]),
        limit=10,
    )
    # Alpha (2 failures) first; its two failures tie on time -> smallest failure_id (x0).
    # Then the singletons Zeta and alpha in code point order ("Z" < "a").
    assert ids(chosen) == ["x0", "x2", "x3", "x1"]


def test_limit_is_respected_and_order_of_input_does_not_matter() -> None:
    spec = [(f"f{i:03d}", f"summary {i % 13}", (i * 37) % 101) for i in range(200)]
    cands = failures(spec)
    first = select_evidence(cands)
    assert len(first) == 10
    rng = random.Random(5)
    for _ in range(20):
        shuffled = cands[:]
        rng.shuffle(shuffled)
        assert select_evidence(shuffled) == first


def test_fewer_failures_than_the_limit_are_all_kept_once() -> None:
    cands = failures([("a", "same", 1), ("b", "same", 2)])
    assert ids(select_evidence(cands + cands)) == ["b", "a"]


def test_the_candidate_subset_gives_the_same_choice_as_all_failures() -> None:
    """The repository fetches only the representatives of the top summaries and the most
    recent failures; the rule must pick the same from that subset as from everything."""
    rng = random.Random(11)
    for _ in range(50):
        spec = [
            (f"f{i:04d}", f"s{rng.randrange(25)}", rng.randrange(500))
            for i in range(rng.randrange(1, 300))
        ]
        everything = failures(spec)
        limit = 10
        by_recency = sorted(everything, key=lambda c: c.failure_id)
        by_recency.sort(key=lambda c: c.observed_at, reverse=True)
        reps: dict[str, EvidenceCandidate] = {}
        for c in by_recency:
            reps.setdefault(c.summary, c)
        top = sorted(reps.values(), key=lambda c: (-c.summary_count, c.summary))[:limit]
        subset = top + by_recency[:limit]
        assert select_evidence(subset, limit) == select_evidence(everything, limit)
