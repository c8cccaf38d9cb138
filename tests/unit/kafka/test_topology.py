"""The topic plan takes nothing away silently: what it refuses without --allow-shrink."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spectral.kafka.topology import (
    DAY_MS,
    Action,
    ExistingTopic,
    TopicPolicy,
    declared_topics,
    plan,
    segment_ms,
)


def _existing(spec_config: dict[str, str], **overrides: str) -> ExistingTopic:
    config = {**spec_config, **overrides}
    return ExistingTopic("t.platform.failure_cluster.detected", 3, 1, config, config)


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_dropping_compaction_is_a_shrink(policy: str) -> None:
    """A compacted topic keeps each key's newest record past retention.ms (the newest snapshot
    of every cluster, which a rebuild reads); switching it to delete drops all of them after
    the retention: that takes data away, so it needs --allow-shrink like a shorter retention."""
    (spec,) = [
        s
        for s in declared_topics(["platform.failure_cluster.detected"], "t.", TopicPolicy(), 1)
        if s.source is None
    ]
    existing = {spec.name: _existing(dict(spec.config), **{"cleanup.policy": policy})}
    (refused,) = plan([spec], existing)
    assert refused.setting == "cleanup.policy"
    assert refused.action is Action.REFUSED
    assert "--allow-shrink" in refused.note
    (allowed,) = plan([spec], existing, allow_shrink=True)
    assert allowed.action is Action.SET_CONFIG


def test_a_longer_or_unlimited_retention_is_kept_without_the_flag() -> None:
    (spec,) = [
        s
        for s in declared_topics(["platform.failure_cluster.detected"], "t.", TopicPolicy(), 1)
        if s.source is None
    ]
    for retention in ("-1", str(30 * 86_400_000)):
        existing = {spec.name: _existing(dict(spec.config), **{"retention.ms": retention})}
        (change,) = plan([spec], existing)
        assert change.action is Action.REFUSED, retention


@given(
    retention=st.integers(min_value=-1, max_value=10 * 365 * DAY_MS),
    dlq=st.integers(min_value=-1, max_value=10 * 365 * DAY_MS),
)
def test_every_topic_declares_a_segment_roll_that_lets_retention_act_on_a_quiet_topic(
    retention: int, dlq: int
) -> None:
    """Kafka deletes closed segments only; the default roll (7 days) keeps a quiet topic's
    records a week past their retention. Each declared topic rolls within a day, within a
    seventh of its retention (when that is over a minute), and never under a minute."""
    policy = TopicPolicy(retention_ms=retention, dlq_retention_ms=dlq)
    for spec in declared_topics(["platform.failure_cluster.detected"], "t.", policy, 1):
        kept = int(spec.config["retention.ms"])
        roll = int(spec.config["segment.ms"])
        assert roll == segment_ms(kept)
        assert 60_000 <= roll <= DAY_MS
        if kept >= 7 * 60_000:
            assert roll <= kept // 7


def test_a_lower_segment_roll_is_applied_without_the_flag() -> None:
    """Rolling segments sooner takes nothing away: a cluster at Kafka's default is brought to
    the declared roll by a plain apply."""
    (spec,) = [
        s
        for s in declared_topics(["platform.failure_cluster.detected"], "t.", TopicPolicy(), 1)
        if s.source is None
    ]
    existing = {spec.name: _existing(dict(spec.config), **{"segment.ms": str(7 * DAY_MS)})}
    (change,) = plan([spec], existing)
    assert change.setting == "segment.ms"
    assert change.action is Action.SET_CONFIG
