"""Forwarded headers are believed from the configured proxies only (spectral/api/proxy.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spectral.api.proxy import ForwardedHeaders, TrustedProxies


async def seen_by_app(
    peer: str, headers: list[tuple[bytes, bytes]], trusted: str = "127.0.0.1"
) -> dict[str, Any]:
    """The scope the app behind the middleware gets for a request from ``peer``."""
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def send(message: Any) -> None:
        pass

    scope = {
        "type": "http",
        "scheme": "http",
        "client": (peer, 50000),
        "headers": [(b"host", b"api.internal:8000"), *headers],
    }
    await ForwardedHeaders(app, trusted=TrustedProxies(trusted))(scope, receive, send)
    return seen


FORWARDED = [
    (b"x-forwarded-for", b"203.0.113.9"),
    (b"x-forwarded-proto", b"https"),
    (b"x-forwarded-host", b"console.example.org"),
    (b"forwarded", b"for=203.0.113.9"),
]


async def test_a_trusted_proxy_speaks_for_the_client() -> None:
    seen = await seen_by_app("127.0.0.1", FORWARDED)
    assert seen["client"] == ("203.0.113.9", 0)
    assert seen["scheme"] == "https"
    assert dict(seen["headers"])[b"host"] == b"console.example.org"
    assert not any(k.startswith(b"x-forwarded") or k == b"forwarded" for k, _ in seen["headers"])


async def test_anyone_else_is_not_believed_and_the_headers_never_reach_the_app() -> None:
    seen = await seen_by_app("198.51.100.7", FORWARDED)
    assert seen["client"] == ("198.51.100.7", 50000)
    assert seen["scheme"] == "http"
    assert dict(seen["headers"])[b"host"] == b"api.internal:8000"
    assert not any(k.startswith(b"x-forwarded") or k == b"forwarded" for k, _ in seen["headers"])


async def test_networks_and_the_rightmost_untrusted_hop() -> None:
    chain = [(b"x-forwarded-for", b"198.51.100.1, 203.0.113.9, 10.0.0.2")]
    seen = await seen_by_app("10.0.0.3", chain, trusted="10.0.0.0/8")
    assert seen["client"] == ("203.0.113.9", 0)  # 10.0.0.2 is a proxy of ours too
    everyone = await seen_by_app("192.0.2.1", chain, trusted="*")
    assert everyone["client"] == ("198.51.100.1", 0)


def test_a_setting_that_is_not_an_address_is_refused() -> None:
    with pytest.raises(ValueError, match="not an address"):
        TrustedProxies("127.0.0.1, proxy.internal")
    assert "::1" in TrustedProxies("::1")
    assert "not-an-ip" not in TrustedProxies("0.0.0.0/0")


@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"forwarded"]
            ),
            st.binary(max_size=60),
        ),
        max_size=6,
    )
)
async def test_any_bytes_in_forwarded_headers_are_ignored_or_applied_never_an_error(
    headers: list[tuple[bytes, bytes]],
) -> None:
    seen = await seen_by_app("127.0.0.1", headers)
    assert seen["scheme"] in ("http", "https")
    host = dict(seen["headers"])[b"host"]
    assert host.isascii()
    assert b"," not in host
    assert b" " not in host
