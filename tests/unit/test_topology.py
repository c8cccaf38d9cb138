"""The topic plan takes nothing away silently: what it refuses without --allow-shrink."""

from __future__ import annotations

import pytest

from spectral.kafka.topology import Action, ExistingTopic, TopicPolicy, declared_topics, plan


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
