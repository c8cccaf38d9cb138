"""The severity policy (ADR-057 D4): the documented table, tier by tier."""

from __future__ import annotations

from datetime import timedelta

import pytest

from producers.clusters.severity import Criticality, SeverityPolicy, derive_severity

N = Criticality.NORMAL


@pytest.mark.parametrize(
    ("count", "recent", "expected"),
    [
        (1, 1, "low"),
        (9, 4, "low"),
        (10, 1, "medium"),  # size tier
        (49, 4, "medium"),
        (50, 0, "high"),
        (6, 5, "medium"),  # rate tier
        (30, 24, "medium"),
        (30, 25, "high"),
        (49, 25, "high"),  # the higher of the two
    ],
)
def test_base_tier_is_the_higher_of_size_and_rate(count: int, recent: int, expected: str) -> None:
    assert derive_severity(count, recent, N) == expected


@pytest.mark.parametrize(
    ("criticality", "base_low", "base_medium", "base_high"),
    [
        (Criticality.LOW, "low", "low", "medium"),
        (Criticality.NORMAL, "low", "medium", "high"),
        (Criticality.HIGH, "medium", "high", "high"),
        (Criticality.CRITICAL, "high", "high", "high"),
    ],
)
def test_criticality_shifts_the_tier_within_bounds(
    criticality: Criticality, base_low: str, base_medium: str, base_high: str
) -> None:
    assert derive_severity(1, 1, criticality) == base_low
    assert derive_severity(10, 1, criticality) == base_medium
    assert derive_severity(50, 1, criticality) == base_high


def test_thresholds_are_configurable() -> None:
    policy = SeverityPolicy(medium_size=2, high_size=3, medium_rate=100, high_rate=200)
    assert derive_severity(1, 1, N, policy) == "low"
    assert derive_severity(2, 1, N, policy) == "medium"
    assert derive_severity(3, 1, N, policy) == "high"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"medium_size": 0},
        {"medium_size": 60, "high_size": 50},
        {"medium_rate": 30, "high_rate": 25},
        {"rate_window": timedelta(0)},
    ],
)
def test_inconsistent_policies_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"must|need"):
        SeverityPolicy(**kwargs)  # type: ignore[arg-type]


def test_severity_grows_monotonically_with_size_and_rate() -> None:
    order = {"low": 0, "medium": 1, "high": 2}
    for criticality in Criticality:
        previous = 0
        for count in range(1, 80):
            tier = order[derive_severity(count, min(count, 30), criticality)]
            assert tier >= previous
            previous = tier
