"""Timestamps on the wire: RFC 3339 in, ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` out."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from contracts import format_utc, parse_utc
from contracts.errors import validation_errors
from contracts.fields import (
    EARLIEST,
    END,
    MIN_YEAR,
    RFC3339_PATTERN,
    UUID_PATTERN,
    UtcDatetime,
    Uuid,
)
from tests.unit.contracts import factories as f

RFC3339 = re.compile(RFC3339_PATTERN.removeprefix("^").removesuffix("$"), re.ASCII)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T10:00:00Z", datetime(2026, 11, 21, 10, tzinfo=UTC)),
        ("2026-11-21t10:00:00z", datetime(2026, 11, 21, 10, tzinfo=UTC)),
        ("2026-11-21T10:00:00.5Z", datetime(2026, 11, 21, 10, 0, 0, 500000, tzinfo=UTC)),
        ("2026-11-21T10:00:00.123456789Z", datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-21T12:30:00+02:30", datetime(2026, 11, 21, 10, tzinfo=UTC)),
        ("2026-11-21T05:00:00-05:00", datetime(2026, 11, 21, 10, tzinfo=UTC)),
        ("2026-11-21T10:00:00-00:00", datetime(2026, 11, 21, 10, tzinfo=UTC)),
        ("2026-12-31T23:30:00-01:00", datetime(2027, 1, 1, 0, 30, tzinfo=UTC)),
    ],
)
def test_rfc3339_text_is_read_as_utc(text: str, expected: datetime) -> None:
    parsed = parse_utc(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "value",
    [
        "2026-11-21T10:00:00",  # naive
        "2026-11-21",  # date only
        "2026-11-21T10:00Z",  # no seconds
        "2026-11-21 10:00:00Z",  # space separator
        "20261121T100000Z",  # basic format
        "2026-W47-6T10:00:00Z",  # week date
        "2026-11-21T10:00:00,5Z",  # comma fraction
        "2026-11-21T10:00:00.Z",  # empty fraction
        "2026-11-21T10:00:00.",  # nothing after the dot
        "2026-11-21T10:00:00+",
        "2026-11-21T10:00:00+0100",
        "2026-11-21T10:00:00+01",
        "2026-11-21T10:00:00+01:00:00",
        "2026-11-21T10:00:60Z",  # leap second
        "2026-02-30T10:00:00Z",
        "2026-11-21T24:00:00Z",
        "2026-11-21T10:00:00Z\n",
        "\uff12026-11-21T10:00:00Z",  # a fullwidth digit
        "2026-11-21T10:Z\x00:00.123456Z",  # fromisoformat stops at NUL: read as 10:00Z
        "2026-11-21T10:00:Z\x00Z",
        "2026-11-21T10:00:00Z\x00",
        "0001-01-01T00:00:00+01:00",  # before year 1 once in UTC
        "0001-01-01T00:00:00Z",  # datetime.min: stored as -infinity by asyncpg
        "9999-12-31T23:59:59.999999Z",  # datetime.max: stored as infinity
        "1969-12-31T23:59:59.999999Z",  # before the bound
        "9999-01-01T00:00:00Z",  # past the bound
        "1970-01-01T00:30:00+01:00",  # the year as written is in bounds, the instant is not
        "9998-12-31T23:00:00-01:00",  # ditto, at the other end
        "1969-12-31T23:30:00-01:00",  # an instant in bounds, but the year as written is not
        "2026-11-21T10:00:00+05:60",  # fromisoformat reads it as +06:00
        "2026-11-21T10:00:00+24:00",
        "2100-02-29T10:00:00Z",  # not a leap year
        1763719200,
        1763719200.5,
        None,
        datetime(2026, 11, 21, 10),  # noqa: DTZ001 - naive on purpose
    ],
)
def test_everything_else_is_refused(value: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies by case
        parse_utc(value)


@pytest.mark.parametrize(
    "text",
    [
        "1970-01-01T00:00:00Z",
        "9998-12-31T23:59:59.999999999Z",
        "2000-02-29T00:00:00Z",
        "2024-02-29T00:00:00+23:59",
    ],
)
def test_the_bounds_are_inclusive_at_the_start_and_exclusive_at_the_end(text: str) -> None:
    assert EARLIEST <= parse_utc(text) < END


def test_sub_microsecond_digits_are_truncated_never_rounded() -> None:
    assert parse_utc("2026-11-21T10:00:00.9999999Z").microsecond == 999999
    assert parse_utc("9998-12-31T23:59:59.9999999Z") < END  # rounding would leave the bound
    assert parse_utc("2026-11-21T10:00:00.0000009Z") == parse_utc("2026-11-21T10:00:00Z")


def test_datetimes_outside_the_bound_are_refused() -> None:
    with pytest.raises(ValueError, match="instant"):
        parse_utc(datetime(1969, 12, 31, tzinfo=UTC))
    with pytest.raises(ValueError, match="instant"):
        parse_utc(datetime.max.replace(tzinfo=UTC))


def test_aware_datetimes_are_converted() -> None:
    local = datetime(2026, 11, 21, 12, tzinfo=timezone(timedelta(hours=2)))
    assert parse_utc(local) == datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert parse_utc(local).tzinfo is UTC


def test_the_written_form_has_six_digits_and_z() -> None:
    assert format_utc(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"
    assert format_utc(datetime(5, 1, 2, 3, 4, 5, 7, tzinfo=UTC)) == "0005-01-02T03:04:05.000007Z"


@given(f.utc_times, f.offsets)
def test_written_timestamps_read_back_and_match_the_pattern(
    moment: datetime, offset: timedelta
) -> None:
    text = format_utc(moment)
    assert RFC3339.fullmatch(text)
    assert parse_utc(text) == moment
    shifted = moment.astimezone(timezone(offset)).isoformat()
    if shifted[:4] >= f"{MIN_YEAR:04d}":
        assert parse_utc(shifted) == moment
    else:  # 1970-01-01T00:00Z written with a negative offset: the year as written is 1969
        with pytest.raises(ValueError, match="year"):
            parse_utc(shifted)


fragments = st.sampled_from(
    [
        "2026",
        "-",
        "11",
        "21",
        "T",
        "t",
        " ",
        "10",
        ":",
        "00",
        "60",
        ".",
        "5",
        "123456789",
        "Z",
        "z",
        "+",
        "-",
        "01",
        ":00",
        ",",
        "W47",
        "",
        "x",
        "\uff12",  # a fullwidth digit
    ]
)


@given(st.lists(fragments, max_size=14).map("".join))
def test_the_fast_layout_check_accepts_only_the_pattern(text: str) -> None:
    try:
        parse_utc(text)
    except ValueError:
        return
    assert RFC3339.fullmatch(text), text


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2),  # noqa: DTZ001 - naive bounds for hypothesis
        max_value=datetime(9998, 12, 30),  # noqa: DTZ001
    ),
    st.sampled_from(["T", "t"]),
    st.sampled_from(["", ".1", ".123456", ".123456789"]),
    st.sampled_from(["Z", "z", "+00:00", "-00:00", "+05:30", "-11:00"]),
)
def test_every_valid_rfc3339_text_is_accepted(
    moment: datetime, sep: str, fraction: str, offset: str
) -> None:
    text = moment.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + fraction + offset
    assert RFC3339.fullmatch(text)
    parse_utc(text)


_STAMP = "2026-11-21T10:00:00.123456+01:00"


@given(
    st.text(max_size=40)
    | st.builds(
        lambda cut, end, insert: _STAMP[:cut] + insert + _STAMP[end:],
        st.integers(0, len(_STAMP)),
        st.integers(0, len(_STAMP)),
        st.text(alphabet="0.:+-Zz", max_size=2),
    )
)
def test_any_text_parses_or_raises_value_error_only(text: str) -> None:
    try:
        parse_utc(text)
    except ValueError:
        return


_TEMPLATES = ("2026-11-21T10:00:00.123456+01:00", "2026-11-21T10:00:00Z", "2026-11-21T10:00:00.5z")
_EDITS = sorted(
    {t[:i] for t in _TEMPLATES for i in range(len(t) + 1)}
    | {t[:i] + t[i + 1 :] for t in _TEMPLATES for i in range(len(t))}
    | {t[:i] + c + t[i:] for t in _TEMPLATES for i in range(len(t) + 1) for c in ".:+Z"}
)


def test_every_truncation_deletion_and_insertion_parses_or_raises_value_error() -> None:
    for text in _EDITS:
        try:
            parsed = parse_utc(text)
        except ValueError:
            continue
        assert RFC3339.fullmatch(text), text
        assert parsed.tzinfo is UTC


_WRITTEN = "2026-11-21T10:00:00.123456Z"
_REPLACEMENTS = "0123456789-:.TtZz+ ,W_x\x00\uff12\u0660"


def reference_parse(text: str) -> datetime | None:
    """The accepted set spelled out: the pattern, then a real date and time (None: refused)."""
    if not RFC3339.fullmatch(text):
        return None
    moment = datetime.fromisoformat(text.upper()).astimezone(UTC)  # the pattern made it valid
    return moment if EARLIEST <= moment < END else None


def test_every_one_character_change_of_the_written_form_parses_as_the_reference() -> None:
    # The written form has its own path through parse_utc; it must agree with the general one.
    for index in range(len(_WRITTEN)):
        for char in _REPLACEMENTS:
            text = _WRITTEN[:index] + char + _WRITTEN[index + 1 :]
            expected = reference_parse(text)
            try:
                parsed = parse_utc(text)
            except ValueError:
                assert expected is None, text
                continue
            assert parsed == expected, text
            assert parsed.tzinfo is UTC


digit_soup = st.builds(
    "{}-{}-{}{}{}:{}:{}{}{}".format,
    st.sampled_from(
        ["1969", "1970", "1972", "1900", "2000", "2024", "2100", "9996", "9998", "9999"]
    ),
    st.sampled_from(["00", "01", "02", "04", "09", "11", "12", "13"]),
    st.sampled_from(["00", "01", "28", "29", "30", "31", "32"]),
    st.sampled_from(["T", "t"]),
    st.sampled_from(["00", "09", "19", "23", "24"]),
    st.sampled_from(["00", "59", "60"]),
    st.sampled_from(["00", "59", "60"]),
    st.sampled_from(["", ".0", ".999999", ".1234567891"]),
    st.sampled_from(["Z", "z", "+00:00", "-00:00", "+23:59", "-23:59", "+24:00", "+05:60"]),
)


@given(digit_soup)
def test_parse_utc_accepts_exactly_the_pattern_within_the_instant_bound(text: str) -> None:
    try:
        parsed: datetime | None = parse_utc(text)
    except ValueError:
        parsed = None
    assert parsed == reference_parse(text), text


@given(f.utc_times)
def test_the_written_form_reads_back_as_utc(moment: datetime) -> None:
    parsed = parse_utc(format_utc(moment))
    assert parsed == moment
    assert parsed.tzinfo is UTC


_TWO_CHANGE_TEMPLATES = (_WRITTEN, "2026-11-21T10:00:00Z", "2026-11-21T10:00:00.5-01:30")


def test_every_two_character_change_parses_as_the_reference() -> None:
    # NUL ends the text for fromisoformat, so a change must come in pairs to fool it ("Z\x00").
    for template in _TWO_CHANGE_TEMPLATES:
        for first, second in itertools.combinations(range(len(template)), 2):
            for one, two in itertools.product("0Z+:.\x00x", repeat=2):
                text = (
                    template[:first]
                    + one
                    + template[first + 1 : second]
                    + two
                    + template[second + 1 :]
                )
                try:
                    parsed: datetime | None = parse_utc(text)
                except ValueError:
                    parsed = None
                assert parsed == reference_parse(text), text


# ---- the fields as pydantic validates them: the same verdicts and values as the functions ----


class _Text(str):
    """A str subclass (never from JSON; read as text)."""

    __slots__ = ()


_SOME_UUID = UUID("6f1c2b1e-4d0a-4c59-9a57-1f0e9f3b7a10")  # fixed: test ids equal on every worker
_TIMESTAMP = TypeAdapter(UtcDatetime)
_UUID = TypeAdapter(Uuid)
_CANONICAL_UUID = re.compile(UUID_PATTERN.removeprefix("^").removesuffix("$"), re.ASCII)


def assert_field_reads_as_parse_utc(value: object) -> None:
    """The field (a Rust path for the written form, :func:`parse_utc` for the rest) accepts
    what parse_utc accepts, with the same value and ``tzinfo``, and refuses the rest with
    parse_utc's reason."""
    try:
        expected: datetime | None = parse_utc(value)
    except ValueError as exc:
        expected, reason = None, f"Value error, {exc}"
    try:
        parsed = _TIMESTAMP.validate_python(value)
    except ValidationError as exc:
        assert expected is None, (value, expected)
        (error,) = validation_errors(exc)
        assert error["msg"] == reason, value
        return
    assert parsed == expected, value
    assert type(parsed) is datetime, value
    assert parsed.tzinfo is UTC, value


@given(
    digit_soup
    | st.lists(fragments, max_size=14).map("".join)
    | f.utc_times.map(format_utc)
    | st.text(max_size=30)
    | st.sampled_from(_EDITS)
    | st.builds(
        lambda moment, index, char: (
            format_utc(moment)[:index] + char + format_utc(moment)[index + 1 :]
        ),
        f.utc_times,
        st.integers(0, 26),
        st.sampled_from(_REPLACEMENTS),
    )
)
def test_the_timestamp_field_reads_text_as_parse_utc(text: str) -> None:
    assert_field_reads_as_parse_utc(text)


@pytest.mark.parametrize(
    "value",
    [
        1763719200,
        None,
        b"2026-11-21T10:00:00.123456Z",
        datetime(2026, 11, 21, 10),  # noqa: DTZ001 - naive on purpose
        datetime(2026, 11, 21, 12, tzinfo=timezone(timedelta(hours=2))),
        datetime(9998, 12, 31, 23, tzinfo=timezone(timedelta(hours=-2))),
        "9998-12-31T23:59:59.999999Z",
        "9999-01-01T00:00:00.000000Z",
        "1969-12-31T23:59:59.999999Z",
        "2026-02-29T10:00:00.000000Z",
        "2024-02-29T10:00:00.000000Z",
        "2026-11-21T10:00:00.123456\uff3a",
        "\u0662026-11-21T10:00:00.123456Z",
        "2026-11-21T10:00:00.123456Z\n",
        _Text("2026-11-21T10:00:00.123456Z"),
    ],
)
def test_the_timestamp_field_reads_other_values_as_parse_utc(value: object) -> None:
    assert_field_reads_as_parse_utc(value)


def test_a_naive_datetime_is_refused_with_a_message_that_says_so() -> None:
    with pytest.raises(ValidationError, match="naive"):
        _TIMESTAMP.validate_python(datetime(2026, 11, 21, 10))  # noqa: DTZ001


@given(
    st.uuids().flatmap(
        lambda u: st.sampled_from(
            [
                str(u),
                str(u).upper(),
                str(u)[:9] + str(u)[9:].upper(),
                u.hex,
                f"{{{u}}}",
                f"urn:uuid:{u}",
                str(u)[:35],
                str(u) + "0",
                str(u) + "\n",
                " " + str(u),
                str(u).replace("-", "\u2010"),
                str(u).replace("a", "\uff41"),
            ]
        )
    )
    | st.text(alphabet="0123456789abcdefABCDEF-{}:\x00", max_size=40)
)
def test_the_uuid_field_reads_only_the_one_spelling(text: str) -> None:
    if not _CANONICAL_UUID.fullmatch(text):
        with pytest.raises(ValidationError, match="lowercase hex, hyphenated"):
            _UUID.validate_python(text)
        return
    parsed = _UUID.validate_python(text)
    assert type(parsed) is UUID
    assert str(parsed) == text
    assert parsed == UUID(text)


@pytest.mark.parametrize(
    "value",
    [
        _SOME_UUID,
        None,
        5,
        5.0,
        b"\x00" * 16,
        str(_SOME_UUID).encode(),
        _Text(str(_SOME_UUID).upper()),
        [],
        {},
    ],
)
def test_the_uuid_field_takes_uuid_objects_and_refuses_other_types(value: object) -> None:
    if isinstance(value, UUID):
        assert _UUID.validate_python(value) is value
        assert _UUID.validate_python(_Text(value)) == value  # text of a subclass: read as text
        return
    with pytest.raises(ValidationError, match="lowercase hex, hyphenated"):
        _UUID.validate_python(value)
