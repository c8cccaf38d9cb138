"""The backlog gauges are read every stats interval, unless reading them takes long: a count of
a large backlog reads every row of it, and the gauges must not take a database core with it."""

from __future__ import annotations

import pytest

from spectral.outbox.relay.relay import GAUGE_SHARE, gauge_pause


@pytest.mark.parametrize("took", [0.0, 0.001, 0.05])
def test_a_quick_reading_keeps_the_interval(took: float) -> None:
    assert gauge_pause(1.0, took) == 1.0


@pytest.mark.parametrize("took", [0.06, 0.2, 2.0])
def test_a_slow_reading_holds_the_gauges_to_their_share(took: float) -> None:
    pause = gauge_pause(1.0, took)
    assert pause > 1.0
    assert took / pause == pytest.approx(GAUGE_SHARE)
