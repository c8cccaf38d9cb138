"""asyncpg's checks of array parameters, without a Python frame per check.

asyncpg encodes a list parameter as a PostgreSQL array after asking, of the list and of every
element, whether it is an iterable, a sized container or a mapping (``collections.abc``'s
``Iterable``, ``Sized``, ``Mapping``): an ``isinstance`` against an abstract base class, which
CPython answers by calling ``ABCMeta.__instancecheck__`` — a Python function whose only work is
to call the C function ``_abc._abc_instancecheck(cls, instance)``. A consumer sends every event
of a batch through such arrays (the dedup claim's keys, event ids, partitions and offsets; a
projection's rows), so that Python frame is paid one to three times per element, ~60-180 ns
each.

:func:`install` gives asyncpg's array encoder, in place of the three classes, stand-ins whose
``isinstance`` calls the same C function for the same class directly (through
``functools.partial``, which is not a descriptor: called with the instance alone). Every answer
is the abstract base class's own, cache and registrations included: no parameter is encoded
differently, none newly accepted or refused. It is installed only when asyncpg's encoder holds
exactly these classes under the names it reads and the stand-ins answer as the classes do on a
sample; otherwise nothing changes.
"""

from __future__ import annotations

import collections.abc as abcs
import importlib
from datetime import UTC, datetime
from functools import partial
from typing import Any, Final, cast
from uuid import UUID

_NAMES: Final = {
    "IterableABC": abcs.Iterable,
    "SizedABC": abcs.Sized,
    "MappingABC": abcs.Mapping,
    "SequenceABC": abcs.Sequence,
}
"""The names asyncpg's protocol module (its array and composite encoders) reads, and the class
each must hold."""

_SAMPLE: Final[tuple[Any, ...]] = (
    None,
    1,
    1.5,
    "text",
    b"bytes",
    bytearray(b"x"),
    memoryview(b"x"),
    [1],
    (1,),
    {"a": 1},
    {1},
    frozenset(),
    range(2),
    iter([]),
    datetime(2026, 1, 1, tzinfo=UTC),
    UUID(int=1),
    object(),
)


def stand_in(abc: type) -> type:
    """A class whose ``isinstance`` is ``abc``'s own answer, from ``_abc`` directly."""
    check = importlib.import_module("_abc")._abc_instancecheck  # noqa: SLF001 - what ABCMeta calls
    meta = type(f"Fast{abc.__name__}Meta", (type,), {"__instancecheck__": partial(check, abc)})
    return cast("type", meta(f"Fast{abc.__name__}", (), {"__doc__": _doc(abc)}))


def _doc(abc: type) -> str:
    return f"isinstance as {abc.__name__}'s"


def _protocol() -> Any:
    from asyncpg.protocol import protocol  # noqa: PLC0415 - the compiled encoder's module

    return protocol


def installed() -> bool:
    """True when asyncpg's encoder checks through the stand-ins."""
    protocol = _protocol()
    return all(
        getattr(getattr(protocol, name, None), "__doc__", None) == _doc(abc)
        for name, abc in _NAMES.items()
    )


def install() -> bool:
    """Give asyncpg's array encoder the stand-ins (idempotent); False when it does not hold
    exactly the expected classes, or a stand-in would answer differently on the sample."""
    protocol = _protocol()
    if installed():
        return True
    if any(getattr(protocol, name, None) is not abc for name, abc in _NAMES.items()):
        return False
    try:
        stand_ins = {name: stand_in(abc) for name, abc in _NAMES.items()}
    except (ImportError, AttributeError):  # no C implementation of abc: nothing to skip
        return False
    try:
        if any(
            isinstance(value, stand_ins[name]) != isinstance(value, abc)
            for name, abc in _NAMES.items()
            for value in _SAMPLE
        ):
            return False
    except TypeError:  # e.g. a Python whose partial binds as a method
        return False
    for name, fast in stand_ins.items():
        setattr(protocol, name, fast)
    return True


def uninstall() -> None:
    """asyncpg's own classes back (tests)."""
    protocol = _protocol()
    for name, abc in _NAMES.items():
        if hasattr(protocol, name):
            setattr(protocol, name, abc)
