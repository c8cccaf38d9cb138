"""Every database URL written as the drivers document it — user, password, database and
parameter values percent-encoded — that asyncpg reads as its author meant is accepted by the
settings, and its password is never shown by ``Settings.describe``.

asyncpg's own parser is the oracle (a private function of asyncpg: the one its ``connect``
calls); the URLs cover TCP hosts (names, IPv4, bracketed IPv6, lists, with and without ports),
socket directories in the netloc or in ``host=``, no host, the parameters asyncpg and libpq read
and the scheme in any letter case."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

from asyncpg.connect_utils import _parse_connect_dsn_and_args  # type: ignore[attr-defined]
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from spectral.settings import Settings

MARK = "\u2603Sekret9"  # in every password: where it shows, the password shows


def _asyncpg_reads(url: str) -> Any:
    return _parse_connect_dsn_and_args(
        dsn=url,
        host=None,
        port=None,
        user=None,
        password=None,
        passfile=None,
        database=None,
        ssl=None,
        service=None,
        servicefile=None,
        direct_tls=None,
        server_settings=None,
        target_session_attrs=None,
        krbsrvname=None,
        gsslib=None,
    )


def _encoded(text: str) -> str:
    return quote(text, safe="")


_LABELS = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
_NAMES = st.lists(_LABELS, min_size=1, max_size=3).map(".".join)
_IPV4 = st.ip_addresses(v=4).map(str)
_IPV6 = st.ip_addresses(v=6).map(lambda a: f"[{a}]")
_DIR_CHARS = st.characters(codec="utf-8", exclude_characters="\x00,/")
_SOCKET_DIRS = (
    st.lists(st.text(_DIR_CHARS, min_size=1, max_size=8), min_size=1, max_size=4)
    .map(lambda parts: "/" + "/".join(parts))
    .filter(lambda d: len(os.fsencode(d)) <= 60 and ".s.PGSQL." not in d)
)
_PORTS = st.integers(1, 65535)
_VALUES = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=12,
)
_IDENTS = st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True)
_CHOSEN = {
    "sslmode": st.sampled_from(["disable", "allow", "prefer", "require"]),
    "target_session_attrs": st.sampled_from(
        ["any", "primary", "standby", "read-write", "read-only", "prefer-standby"]
    ),
    "gsslib": st.sampled_from(["gssapi", "sspi"]),
    "connect_timeout": st.integers(1, 100).map(str),
    "options": st.tuples(_IDENTS, _VALUES).map(lambda kv: f"-c {kv[0]}={kv[1]}"),
}
_FREE = ["application_name", "passfile", "search_path", "statement_timeout", "TimeZone"]


@st.composite
def _tcp_host(draw: st.DrawFn) -> str:
    host = draw(st.one_of(_NAMES, _IPV4, _IPV6))
    port = draw(st.none() | _PORTS)
    return host if port is None else f"{host}:{port}"


@st.composite
def _parameters(draw: st.DrawFn) -> list[str]:
    fields = []
    for _ in range(draw(st.integers(0, 5))):
        key = draw(st.sampled_from([*_CHOSEN, *_FREE]))
        value = draw(_CHOSEN[key]) if key in _CHOSEN else draw(_VALUES)
        name = _encoded(key) if draw(st.booleans()) else key
        fields.append(f"{name}={_encoded(value)}")
    return fields


@st.composite
def _urls(draw: st.DrawFn) -> tuple[str, str | None, str | None, str | None]:
    scheme = "".join(
        c.upper() if draw(st.booleans()) else c
        for c in draw(st.sampled_from(["postgresql", "postgres"]))
    )
    user = draw(st.none() | st.text(max_size=10))
    password = draw(st.none() | st.tuples(st.text(max_size=8), st.text(max_size=8)).map(MARK.join))
    auth = ""
    if user is not None or password is not None:
        secret = "" if password is None else ":" + _encoded(password)
        auth = f"{_encoded(user or '')}{secret}@"
    query = draw(_parameters())
    shape = draw(st.sampled_from(["tcp", "none", "socket_query", "socket_netloc"]))
    hostspec = ""
    if shape == "tcp":
        hostspec = ",".join(draw(st.lists(_tcp_host(), min_size=1, max_size=3)))
    elif shape == "socket_netloc":
        hostspec = ",".join(
            _encoded(d) for d in draw(st.lists(_SOCKET_DIRS, min_size=1, max_size=2))
        )
    elif shape == "socket_query":
        query.append("host=" + _encoded(draw(_SOCKET_DIRS)))
        if draw(st.booleans()):
            query.append(f"port={draw(_PORTS)}")
    database = draw(st.none() | st.text(max_size=10))
    path = "" if database is None else "/" + _encoded(database)
    if not path and query:
        path = "/"
    query = draw(st.permutations(query))
    url = f"{scheme}://{auth}{hostspec}{path}" + ("?" + "&".join(query) if query else "")
    return url, user, password, database


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(_urls())
def test_a_url_asyncpg_reads_as_meant_is_accepted_and_its_password_never_shown(
    case: tuple[str, str | None, str | None, str | None],
) -> None:
    url, user, password, database = case
    try:
        _, read = _asyncpg_reads(url)
    except Exception:  # noqa: BLE001 - the oracle refuses it: not a URL this test is about
        reject()
    if user:
        assert read.user == user
    if password:
        assert read.password == password
    if database:
        assert read.database == database
    current = Settings(database_url=url)
    shown = json.dumps(current.describe(), ensure_ascii=False) + str(current.describe())
    assert MARK not in shown
    assert _encoded(MARK) not in shown


def test_the_documented_urls_are_accepted() -> None:
    """The examples of libpq's and asyncpg's documentation."""
    for url in [
        "postgresql://",
        "postgresql://localhost",
        "postgresql://localhost:5433",
        "postgresql://localhost/mydb",
        "postgresql://user@localhost",
        "postgresql://user:secret@localhost",
        "postgresql://other@localhost/otherdb?connect_timeout=10&application_name=myapp",
        "postgresql://host1:123,host2:456/somedb?target_session_attrs=any",
        "postgresql://user@localhost:5433/mydb?options=-c%20synchronous_commit%3Doff",
        "postgres://u:p@h/db?sslmode=require",
        "postgresql:///mydb?host=/var/run/postgresql",
        "postgresql://%2Fvar%2Frun%2Fpostgresql/dbname",
        "postgresql://[2001:db8::1234]/database",
    ]:
        Settings(database_url=url)
