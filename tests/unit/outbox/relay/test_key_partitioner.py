"""The relay's partitioner puts every key where aiokafka's default one (murmur2, as the Java
client and librdkafka's murmur2_random) does, whatever it remembers."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from spectral.outbox.relay.publish import KeyPartitioner

_DEFAULT = DefaultPartitioner()


@given(
    keys=st.lists(st.binary(max_size=64), min_size=1, max_size=50),
    partitions=st.integers(min_value=1, max_value=64),
)
def test_every_key_lands_where_the_default_partitioner_puts_it(
    keys: list[bytes], partitions: int
) -> None:
    every = list(range(partitions))
    ours = KeyPartitioner(size=8)  # small: the memory starts afresh along the way
    for key in keys + keys:  # each key twice: computed, then remembered
        assert ours(key, every, every) == _DEFAULT(key, every, every)


def test_a_key_remembered_follows_a_change_of_the_partition_count() -> None:
    ours = KeyPartitioner()
    key = b"c1000000-0000-0000-0000-000000000007"
    for partitions in (6, 12, 5):
        every = list(range(partitions))
        assert ours(key, every, every) == _DEFAULT(key, every, every)
