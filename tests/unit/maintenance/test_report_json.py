"""What `spectral maintenance --json` prints of a dedup cutoff."""

from __future__ import annotations

from datetime import UTC, datetime

from spectral.maintenance.policy import Hold
from spectral.maintenance.run import DedupReport


def test_a_cutoff_at_the_beginning_of_time_is_no_date() -> None:
    """The first outbox generation starts at -infinity: while it is hot the cutoff sits there,
    which the hold explains; printing 0001-01-01 as a date would not."""
    held = DedupReport(hold=Hold.OUTBOX, cutoff=datetime.min.replace(tzinfo=UTC))
    assert held.to_json()["cutoff"] is None
    assert held.to_json()["hold"] == "outbox"
    moment = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
    assert DedupReport(cutoff=moment).to_json()["cutoff"] == moment.isoformat()
    assert DedupReport().to_json()["cutoff"] is None
