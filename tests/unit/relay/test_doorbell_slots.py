"""The order in which a relay tries the doorbell slots."""

from __future__ import annotations

from producers.relay.shards import DOORBELL_BASE, MEMBER_LOCK, SHARD_COUNT, doorbell_slots


def test_every_slot_once_from_the_relays_offset_above_the_other_locks() -> None:
    for offset in range(SHARD_COUNT):
        slots = doorbell_slots(offset)
        assert sorted(slots) == [DOORBELL_BASE + s for s in range(SHARD_COUNT)]
        assert slots[0] == DOORBELL_BASE + offset
    assert DOORBELL_BASE > MEMBER_LOCK > SHARD_COUNT
