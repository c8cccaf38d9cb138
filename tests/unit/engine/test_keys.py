"""The stored form of a dedup key is one-to-one and gives the key back (spectral/engine/keys.py)."""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from spectral.engine.keys import dedup_key, dedup_keys, key_text

_HEX = "0123456789abcdef"
snapshot_keys = st.builds(
    lambda cluster, digest: f"{cluster}:{digest}",
    st.uuids(),
    st.text(_HEX, min_size=32, max_size=32),
)
"""Keys in the form of a failure cluster's ``cluster_id:snapshot_hash``."""
texts = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
"""Any text a decoded envelope can carry: no U+0000, no lone surrogate (both refused below)."""
near_misses = snapshot_keys.flatmap(
    lambda key: st.sampled_from(
        [
            key.upper(),
            key[:-1] + "G",
            key[:-1] + " ",
            key[:35] + " :" + key[37:],
            key.replace("-", "", 1) + "0",
            key + "0",
            key[:-1],
            key.replace(":", "-"),
            key[:10] + "\u0660" + key[11:],  # an Arabic-Indic digit: not a hex digit
        ]
    )
)
any_key = st.one_of(snapshot_keys, near_misses, texts)


@given(snapshot_keys)
def test_a_snapshot_key_is_stored_in_33_bytes_and_read_back(key: str) -> None:
    stored = dedup_key(key)
    assert len(stored) == 33
    assert stored[0] == 0
    cluster, digest = key.split(":")
    assert stored[1:17] == UUID(cluster).bytes
    assert stored[17:] == bytes.fromhex(digest)
    assert key_text(stored) == key


@given(any_key)
@example("")
@example("k")
def test_every_key_reads_back_as_itself(key: str) -> None:
    assert key_text(dedup_key(key)) == key


@given(st.text(), st.sampled_from(["\x00", "\ud800", "\udfff"]))
def test_a_key_no_database_text_can_hold_is_refused(around: str, bad: str) -> None:
    with pytest.raises(ValueError, match="cannot be recorded"):
        dedup_key(around + bad)
    with pytest.raises(ValueError, match="cannot be recorded"):
        dedup_keys([around + bad])


@given(near_misses)
def test_a_key_only_nearly_in_the_snapshot_form_is_kept_as_its_text(key: str) -> None:
    assert dedup_key(key) == key.encode()


@given(any_key, any_key)
def test_two_keys_are_stored_alike_exactly_when_they_are_the_same(a: str, b: str) -> None:
    assert (dedup_key(a) == dedup_key(b)) == (a == b)


def _regrouped(keys: list[str], cut: int) -> list[str]:
    """The keys glued together and cut again at another place (two texts that only
    concatenate to keys in the compact form)."""
    joined = " ".join(keys)
    cut %= len(joined) + 1
    return [joined[:cut], joined[cut:]]


@given(
    st.lists(any_key, max_size=20)
    | st.lists(snapshot_keys, min_size=1, max_size=20)
    | st.builds(_regrouped, st.lists(snapshot_keys, min_size=1, max_size=4), st.integers(0, 400))
    | st.lists(snapshot_keys, min_size=1, max_size=6).map(lambda ks: [" ".join(ks), *ks[1:]])
)
def test_a_batch_is_stored_key_by_key(keys: list[str]) -> None:
    assert dedup_keys(keys) == [dedup_key(k) for k in keys]


def test_a_key_holding_nul_is_refused() -> None:
    with pytest.raises(ValueError, match="U\\+0000"):
        dedup_key("a\x00b")
