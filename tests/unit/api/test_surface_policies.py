"""The pure parts of the surfaces: scopes, cursors, conditional headers, forwarded headers, and
the request guard's checks."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from collections.abc import MutableMapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumers.rule_candidates.api import decode_page_cursor, parse_if_match
from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from consumers.rule_candidates.triage import Sort
from producers.work.plugin import WORK_READ
from spectral.api.conditional import not_modified, versions_in
from spectral.api.cursor import Cursors
from spectral.api.guard import RequestGuard, _check_body, _check_text, _nul_in, _Refused
from spectral.api.problems import ProblemError, invalid_params
from spectral.auth.scopes import OPS_READ, Vocabulary, installed_vocabulary
from spectral.auth.tokens import looks_like_token
from spectral.declaration import Scope
from spectral.errors import ConfigurationError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def test_write_scopes_imply_their_read_scope_and_nothing_else() -> None:
    vocabulary = installed_vocabulary()
    assert vocabulary.effective([TRIAGE_WRITE.name]) == {TRIAGE_WRITE.name, TRIAGE_READ.name}
    assert vocabulary.effective([TRIAGE_READ.name]) == {TRIAGE_READ.name}
    for scope in vocabulary.scopes:
        assert scope.name not in scope.implies
        assert all(s.split(":")[0] == scope.name.split(":")[0] for s in scope.implies)


def test_parse_scopes_refuses_unknown_and_empty() -> None:
    parse = installed_vocabulary().parse
    assert parse(["ops:read", " ops:read", "work:read"]) == (OPS_READ.name, WORK_READ.name)
    with pytest.raises(ValueError, match="unknown scope 'admin'"):
        parse(["admin"])
    with pytest.raises(ValueError, match="at least one"):
        parse([])


def test_a_stored_scope_nobody_registers_allows_nothing() -> None:
    assert installed_vocabulary().effective(["gone:read", "ops:read"]) == {OPS_READ.name}


def test_a_scope_that_implies_an_undeclared_one_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="nobody declares"):
        Vocabulary([Scope("notes:write", "write notes", implies=("notes:read",))])
    with pytest.raises(ConfigurationError, match="declared twice"):
        Vocabulary([OPS_READ, OPS_READ])


CURSORS = Cursors(b"k" * 32)
OTHER_DEPLOYMENT = Cursors(b"o" * 32)


@given(st.text(max_size=40), st.lists(json_values, min_size=1, max_size=3))
def test_a_cursor_round_trips_and_is_bound_to_its_listing_and_key(
    kind: str, key: list[Any]
) -> None:
    cursor = CURSORS.encode(kind, key)
    assert cursor.isascii()
    if len(cursor) <= 512:
        assert CURSORS.decode(cursor, kind, len(key)) == json.loads(json.dumps(key))
    with pytest.raises(ProblemError):
        CURSORS.decode(cursor, kind + "x", len(key))
    with pytest.raises(ProblemError):
        OTHER_DEPLOYMENT.decode(cursor, kind, len(key))


@given(st.lists(json_values, min_size=3, max_size=3), st.data())
def test_a_hand_written_or_altered_cursor_is_a_400(key: list[Any], data: st.DataObject) -> None:
    """Without the key nobody writes a cursor: neither the old unsigned form, nor a body with
    another MAC, nor a handed-out cursor with any character changed."""
    body = base64.urlsafe_b64encode(
        json.dumps({"k": "clusters:severity", "p": key}).encode()
    ).decode()
    for forged in (body, body.rstrip("="), body.rstrip("=") + ".AAAAAAAAAAAAAAAAAAAAAA"):
        assert _status_of(CURSORS.decode, forged, "clusters:severity", 3) == 400
    given_out = CURSORS.encode("clusters:severity", key)
    if len(given_out) > 512:
        return
    where = data.draw(st.integers(0, len(given_out) - 1))
    replacement = data.draw(st.sampled_from("ABCabc012-_.=+/ \u00e9"))
    altered = given_out[:where] + replacement + given_out[where + 1 :]
    if altered != given_out:
        assert _status_of(CURSORS.decode, altered, "clusters:severity", 3) == 400


def test_a_cursor_key_is_long_enough() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Cursors(b"short")
    assert "kkkk" not in repr(CURSORS)


keyset_values = (
    json_values
    | st.integers(-(2**63), 2**64 - 1)  # what JSON a cursor can carry (past bigint too)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.from_regex(r"-?[0-9]{1,25}(\.[0-9]{0,14})?(e[0-9]+)?", fullmatch=True)
    | st.uuids().map(str)
    | st.uuids().map(lambda u: str(u).upper())
)


@given(st.lists(keyset_values, min_size=3, max_size=3))
def test_a_signed_inbox_cursor_is_a_400_or_a_keyset_the_query_can_bind(key: list[Any]) -> None:
    """Even with the key (a leaked one), what reaches list_candidates is a bigint, a plain
    decimal and a UUID (anything else is a 400, never a driver error)."""
    cursor = CURSORS.encode("clusters:severity", key)
    status = _status_of(decode_page_cursor, CURSORS, cursor, Sort.SEVERITY)
    assert status in (200, 400)
    if status == 400:
        return
    decoded = decode_page_cursor(CURSORS, cursor, Sort.SEVERITY)
    assert decoded is not None
    k1, k2, cid = decoded
    assert type(k1) is int
    assert -(2**63) <= k1 < 2**63
    assert re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", k2)
    assert isinstance(cid, uuid.UUID)
    assert str(cid) == key[2]


def _status_of(call: Any, *args: Any) -> int:
    """200 when ``call`` returns, the problem's status when it refuses (anything else fails)."""
    try:
        call(*args)
    except ProblemError as exc:
        return exc.status
    except _Refused as refused:
        return refused.status
    return 200


@given(st.text(max_size=600))
def test_any_text_as_a_cursor_is_a_400(text: str) -> None:
    assert _status_of(CURSORS.decode, text, "clusters:severity", 3) == 400


header_text = st.binary(max_size=80).map(lambda raw: raw.decode("latin-1")) | st.text(max_size=80)


@given(header_text)
def test_if_match_never_crashes(value: str) -> None:
    assert _status_of(parse_if_match, value) in (200, 412, 428)


@given(header_text)
def test_a_tag_names_a_version_only_in_ascii_digits(value: str) -> None:
    _, versions = versions_in(value)
    assert all(0 <= v < 10**18 for v in versions)
    assert not_modified(value, 3) in (True, False)


def test_digits_of_other_scripts_name_no_version() -> None:
    """Superscripts and other scripts' digits pass str.isdigit() but int() refuses them."""
    for tag in ('"\u00b2"', '"\u00b3\u00b9"', '"\u0663"', '"\uff13"', '"\U0001d7d9"'):
        assert versions_in(tag) == (False, [])
        with pytest.raises(ProblemError) as refused:
            parse_if_match(tag)
        assert refused.value.status == 412


def test_if_none_match_compares_weakly() -> None:
    assert not_modified('W/"3"', 3)
    assert not_modified('"1", "3"', 3)
    assert not_modified("*", 3)
    assert not not_modified('"4"', 3)
    assert not not_modified(None, 3)


def test_if_match_forms() -> None:
    assert parse_if_match('"3"') == 3
    assert parse_if_match('W/"1", "7"') == 7
    assert parse_if_match("*") is None
    for bad in ('W/"3"', "3", '"-1"', '"99999999999999999999"'):
        with pytest.raises(ProblemError):
            parse_if_match(bad)
    with pytest.raises(ProblemError) as missing:
        parse_if_match(None)
    assert missing.value.status == 428


@given(json_values)
def test_nul_is_found_wherever_it_hides(value: Any) -> None:
    has_nul = "\\u0000" in json.dumps(value)
    assert (_nul_in(value, ["body"]) is not None) == has_nul


def test_deeply_nested_values_are_walked_without_recursion() -> None:
    value: Any = "a\x00"
    for _ in range(100_000):
        value = [value]
    where = _nul_in(value, ["body"])
    assert where is not None
    assert len(where) == 100_001


@pytest.mark.parametrize(
    ("raw", "slug"),
    [(b"%00", "nul-character"), (b"a=%ff", "not-utf8"), (b"a\x00", "nul-character")],
)
def test_text_checks(raw: bytes, slug: str) -> None:
    with pytest.raises(_Refused) as refused:
        _check_text(raw, "query string")
    assert refused.value.slug == slug


@given(st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_json_body_is_accepted_or_refused_with_a_problem(body: bytes) -> None:
    assert _status_of(_check_body, "application/json", body) in (200, 400, 422)


def test_invalid_params_never_quote_the_input() -> None:
    secret = "SECRET-INPUT-VALUE"  # noqa: S105 - a marker, not a password
    errors = [
        {"loc": ("body", "x"), "msg": f"bad value {secret}", "type": "t", "input": secret},
        {"loc": ("query", "y" * 200), "msg": "too short", "type": "t", "input": secret},
    ]
    out = invalid_params(errors)
    assert secret not in json.dumps(out)
    assert len(str(out[1]["location"][1])) == 64


def test_tokens_have_one_shape() -> None:
    assert looks_like_token("spt_" + "a" * 43)
    assert not looks_like_token("Bearer spt_x")
    assert not looks_like_token("spt_" + "é" * 10)
    assert not looks_like_token("spt_" + "a" * 300)


async def test_a_body_that_trickles_in_is_refused_in_time() -> None:
    """The guard reads bodies before any route authenticates: one byte now and then must not
    hold a connection (and its buffer) open for ever."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a body that never completed reached the app")

    async def trickle() -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {"type": "http.request", "body": b" ", "more_body": True}

    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    guard = RequestGuard(app, body_timeout=0.5)
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/commands/story-backlog/generate-epic",
        "raw_path": b"/commands/story-backlog/generate-epic",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"100")],
    }
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(guard(scope, trickle, send), timeout=10)
    assert asyncio.get_running_loop().time() - started < 5
    assert sent[0]["status"] == 408
    assert json.loads(sent[1]["body"])["type"] == "/problems/body-timeout"
