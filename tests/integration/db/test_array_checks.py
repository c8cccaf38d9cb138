"""asyncpg's array checks through the stand-ins (spectral/db/array_checks.py): every parameter
is encoded exactly as with asyncpg's own checks, or refused with the same error."""

from __future__ import annotations

import collections.abc as abcs
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from spectral.db import array_checks
from spectral.db.connect import create_pool

pytestmark = pytest.mark.integration


class _Registered:
    """A class that is an iterable and sized only by registration."""

    def __init__(self, items: list[int]) -> None:
        self._items = items

    def __iter__(self) -> Iterator[int]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class _Row(abcs.Mapping[str, Any]):
    def __init__(self, **values: Any) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


MOMENT = datetime(2026, 12, 2, 7, 49, 57, 123456, tzinfo=UTC)
CASES: list[tuple[str, str, Any]] = [
    ("ints", "$1::int8[]", [1, 2, None, 3]),
    ("ints tuple", "$1::int8[]", (1, 2)),
    ("ints range", "$1::int8[]", range(3)),
    ("ints set", "$1::int8[]", {5}),
    ("registered", "$1::int8[]", _Registered([1, 2])),
    ("nested", "$1::int8[]", [[1, 2], [3, 4]]),
    ("ragged", "$1::int8[]", [[1, 2], [3]]),
    ("mixed depth", "$1::int8[]", [[1], 2]),
    ("texts", "$1::text[]", ["a", "", None]),
    ("bytes", "$1::bytea[]", [b"\x00a", bytearray(b"b"), memoryview(b"c")]),
    ("uuids", "$1::uuid[]", [str(UUID(int=7)), UUID(int=8)]),
    ("stamps", "$1::timestamptz[]", [MOMENT, None]),
    ("a string as array", "$1::text[]", "abc"),
    ("bytes as array", "$1::bytea[]", b"abc"),
    ("a generator", "$1::int8[]", (i for i in range(2))),
    ("a mapping as array", "$1::int8[]", {"a": 1}),
    ("an int as array", "$1::int8[]", 5),
    ("rows", "$1::platform.rule_candidate_snapshot[]", [None]),
    (
        "row tuples",
        "$1::platform.rule_candidate_snapshot[]",
        [
            (
                str(UUID(int=1)),
                "h",
                UUID(int=2),
                str(UUID(int=3)),
                "low",
                1,
                MOMENT,
                MOMENT,
                None,
                b"[]",
                MOMENT,
            )
        ],
    ),
    (
        "row tuples of microseconds",
        "$1::platform.rule_candidate_snapshot_us[]",
        [
            (
                str(UUID(int=1)),
                "h",
                UUID(int=2),
                str(UUID(int=3)),
                "low",
                1,
                0,
                2**62,
                None,
                b"[]",
                None,
                True,
            )
        ],
    ),
    (
        "row mappings",
        "$1::platform.rule_candidate_snapshot[]",
        [_Row(cluster_id=UUID(int=1), severity="high"), {"failure_count": 3}],
    ),
    ("row of another size", "$1::platform.rule_candidate_snapshot[]", [(UUID(int=1),)]),
]


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_url)
    try:
        yield pool
    finally:
        await pool.close()
        array_checks.install()


async def _outcome(conn: Any, cast: str, value: Any) -> tuple[str, str]:
    if isinstance(value, Iterator):
        value = (i for i in range(2))  # a fresh generator each time
    try:
        return "value", repr(await conn.fetchval(f"SELECT ({cast})::text", value))
    except Exception as exc:  # noqa: BLE001 - the refusal is what is compared
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize(("name", "cast", "value"), CASES, ids=[c[0] for c in CASES])
async def test_every_parameter_is_encoded_or_refused_as_without_the_stand_ins(
    pool: asyncpg.Pool, name: str, cast: str, value: Any
) -> None:
    assert array_checks.installed()  # create_pool installs them
    async with pool.acquire() as conn:
        fast = await _outcome(conn, cast, value)
        array_checks.uninstall()
        assert not array_checks.installed()
        own = await _outcome(conn, cast, value)
        assert array_checks.install()
    assert fast == own, name


def test_a_stand_in_answers_as_its_class_for_registrations_made_after_it() -> None:
    fast = array_checks.stand_in(abcs.Sized)

    class Later:
        pass

    assert not isinstance(Later(), fast)
    abcs.Sized.register(Later)
    assert isinstance(Later(), fast)
    assert isinstance([], fast)
    assert not isinstance(1, fast)
