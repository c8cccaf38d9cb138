from __future__ import annotations

from datetime import UTC, datetime

import pytest

from consumers.rule_candidates.churn import (
    BASELINE_WINDOWS,
    RETENTION_HOURS,
    ChurnReading,
    WindowCount,
    baseline,
    exceeds,
    reading,
)

HOUR = datetime(2026, 1, 8, 12, tzinfo=UTC)


def window(index: int, clusters: int, *, covered: bool = True) -> WindowCount:
    return WindowCount(index=index, covered=covered, clusters=clusters)


def test_the_baseline_averages_the_covered_windows_only() -> None:
    windows = [window(1, 10), window(2, 20), window(3, 900, covered=False)]
    b = baseline(HOUR, windows)
    assert b.average == 15
    assert b.windows == 2
    assert b.hour == HOUR


def test_no_history_means_no_baseline() -> None:
    b = baseline(HOUR, [window(i, 0, covered=False) for i in range(1, 8)])
    assert (b.average, b.windows) == (0.0, 0)
    assert reading(50, b).ratio is None


def test_the_current_window_is_never_part_of_the_baseline() -> None:
    b = baseline(HOUR, [window(0, 1000), window(1, 10)])
    assert b.average == 10


def test_retention_outlives_the_oldest_window() -> None:
    assert RETENTION_HOURS > 24 * (BASELINE_WINDOWS + 1)


@pytest.mark.parametrize(
    ("distinct", "average", "windows", "fires"),
    [
        (31, 10.0, 7, True),  # over 3x
        (30, 10.0, 7, False),  # exactly 3x does not fire
        (100, 10.0, 2, False),  # not enough history
        (19, 1.0, 7, False),  # under the absolute floor
        (20, 0.0, 7, True),  # a quiet week, then a burst of new ids
    ],
)
def test_the_alarm_condition(distinct: int, average: float, windows: int, fires: bool) -> None:
    assert exceeds(ChurnReading(distinct, average, windows)) is fires
