"""Forwarded headers, believed only from the reverse proxies the settings name.

Behind a proxy, the client's address, the scheme it used and the host it asked for arrive in
``X-Forwarded-For``, ``X-Forwarded-Proto`` and ``X-Forwarded-Host``. Anyone can send these
headers, so they are believed only when the peer that connected is one of the configured proxy
addresses (``SPECTRAL_FORWARDED_ALLOW_IPS``, as uvicorn's ``FORWARDED_ALLOW_IPS``). Then the
request is rewritten as the client made it: its address, its scheme (a Secure cookie over
https), its Host (the console's same-origin check compares ``Origin`` with it). From any other
peer every forwarded header (``Forwarded`` and ``X-Forwarded-*``) is removed before the app
sees it, so nothing downstream can be misled by one.

Values are parsed without trust: an address that does not parse, a scheme other than http(s),
a host with characters no host has — each is ignored, never an error.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

_HOST: Final = re.compile(
    r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?"
)
_SCHEMES: Final = {"http": "http", "https": "https"}
_WS_SCHEMES: Final = {"http": "ws", "https": "wss"}

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """Which peers may speak for a client (``*``: every peer)."""

    def __init__(self, spec: str) -> None:
        self.everyone = False
        self.networks: list[Network] = []
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            if item == "*":
                self.everyone = True
                continue
            try:
                self.networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"not an address or a network: {item!r}") from None

    def __contains__(self, address: object) -> bool:
        if self.everyone:
            return True
        if not isinstance(address, str):
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.networks)


def _is_forwarded(name: bytes) -> bool:
    lowered = name.lower()
    return lowered == b"forwarded" or lowered.startswith(b"x-forwarded-")


def _last(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The header's values joined (a repeated header is one list), as latin-1 text."""
    found = [value for key, value in headers if key.lower() == name]
    if not found:
        return None
    return b",".join(found).decode("latin-1")


class ForwardedHeaders:
    """ASGI middleware applying (or dropping) forwarded headers, as the module says."""

    def __init__(self, app: ASGIApp, *, trusted: TrustedProxies) -> None:
        self.app = app
        self.trusted = trusted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers", ()))
        client = scope.get("client")
        peer = client[0] if client else None
        scope = dict(scope)
        if peer in self.trusted:
            self._apply(scope, headers)
        scope["headers"] = [(k, v) for k, v in headers if not _is_forwarded(k)]
        await self.app(scope, receive, send)

    def _apply(self, scope: dict[str, object], headers: list[tuple[bytes, bytes]]) -> None:
        proto = (_last(headers, b"x-forwarded-proto") or "").split(",")[-1].strip().lower()
        if proto in _SCHEMES:
            scheme = _SCHEMES[proto] if scope["type"] == "http" else _WS_SCHEMES[proto]
            scope["scheme"] = scheme
        forwarded_for = _last(headers, b"x-forwarded-for")
        if forwarded_for is not None:
            client = self._client(forwarded_for)
            if client is not None:
                scope["client"] = (client, 0)
        host = (_last(headers, b"x-forwarded-host") or "").split(",")[-1].strip()
        if _HOST.fullmatch(host):
            headers[:] = [(k, v) for k, v in headers if k.lower() != b"host"]
            headers.append((b"host", host.encode("ascii")))

    def _client(self, forwarded_for: str) -> str | None:
        """The first address from the right that is not a trusted proxy (uvicorn's rule); None
        when a hop is not an address."""
        hops = [hop.strip() for hop in forwarded_for.split(",")]
        for hop in hops:
            try:
                ipaddress.ip_address(hop)
            except ValueError:
                return None
        if self.trusted.everyone:
            return hops[0]
        for hop in reversed(hops):
            if hop not in self.trusted:
                return hop
        return hops[0]
