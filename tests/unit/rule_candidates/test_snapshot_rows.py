"""The upsert's rows (repository.py ``SnapshotRow``): a view's fields in their order, then
``ordered_us`` and ``prior_wanted``, the order of the row type
``platform.rule_candidate_snapshot_us`` (migration ``projection_times_as_microseconds``), which
the handler relies on when it builds a row from a view's fields as they are."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from consumers.rule_candidates.handler import _rows
from consumers.rule_candidates.repository import SNAPSHOT_FIELDS
from contracts.failure_cluster import FailureClusterView
from tests.events import EVENTS, encode
from tests.unit.contracts import factories as f

MIGRATION = next(
    (Path(__file__).parents[3] / "schemas" / "sql").glob("*_projection_times_as_microseconds.sql")
)


def test_the_row_type_has_the_views_fields_in_their_order_then_its_own() -> None:
    body = MIGRATION.read_text().split("CREATE TYPE platform.rule_candidate_snapshot_us AS (")[1]
    declared = tuple(re.findall(r"^\s+(\w+)\s+\w+,?$", body.split(");")[0], re.MULTILINE))
    assert declared == SNAPSHOT_FIELDS
    assert (*FailureClusterView.__struct_fields__, "ordered_us", "prior_wanted") == SNAPSHOT_FIELDS


def test_a_winners_row_holds_its_views_values_by_name() -> None:
    envelope = f.cluster_event()
    view, *_ = EVENTS.read_record(encode(envelope), str(envelope.payload.cluster_id).encode())
    assert isinstance(view, FailureClusterView)
    delivery = SimpleNamespace(payload=view)
    capped = view.last_observed_us - 60_000_000  # a producer clock running ahead
    for ordered_us, sent in ((view.last_observed_us, None), (capped, capped)):
        key = (ordered_us, view.last_observed_us, view.failure_count, view.snapshot_hash)
        for superseded, wanted in (((), False), ({view.cluster_id}, True)):
            (row,) = _rows({view.cluster_id: delivery}, {view.cluster_id: key}, superseded)  # type: ignore[dict-item]
            values = dict(zip(SNAPSHOT_FIELDS, row, strict=True))
            assert values == {
                **{name: getattr(view, name) for name in FailureClusterView.__struct_fields__},
                "ordered_us": sent,  # none when not capped: the database reads last_observed_us
                "prior_wanted": wanted,  # only for a cluster with superseded snapshots
            }
