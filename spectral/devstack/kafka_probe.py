"""Is a Kafka broker serving requests? Asked in the Kafka protocol itself, synchronously.

A TCP connect succeeds as soon as the listener socket is bound, before the broker has caught up
with its metadata and been unfenced. So the probe sends ApiVersions (every broker answers v0)
and then a Metadata request for no topics, and calls the broker ready when the Metadata answer
lists it. Hand-written on purpose: it runs before any asyncio loop exists (the CLI, pytest's
session set-up) and must not depend on a client library's version negotiation.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

_API_METADATA = 3
_API_VERSIONS = 18
_CLIENT_ID = b"spectral-devstack-probe"
# Metadata v4..v8 share one request layout (v8 adds two booleans) and begin their responses the
# same way (throttle time, then the brokers); v9+ are "flexible" and encoded differently.
_METADATA_LOWEST = 4
_METADATA_HIGHEST = 8
_MAX_RESPONSE = 1 << 20


@dataclass(frozen=True)
class ProbeResult:
    ready: bool
    detail: str


class _ProtocolError(Exception):
    pass


def probe(host: str, port: int, node_id: int, timeout: float = 2.0) -> ProbeResult:
    """Ask the broker at host:port whether node ``node_id`` serves requests."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            versions = _api_versions(sock)
            metadata = versions.get(_API_METADATA)
            if metadata is None:
                return ProbeResult(ready=False, detail="ApiVersions does not list Metadata")
            low, high = metadata
            version = min(high, _METADATA_HIGHEST)
            if version < max(low, _METADATA_LOWEST):
                # No Metadata version this probe speaks; ApiVersions answering is the best sign.
                return ProbeResult(ready=True, detail=f"Metadata v{low}-v{high} not probed")
            brokers = _metadata_brokers(sock, version)
    except (OSError, _ProtocolError, struct.error) as exc:
        return ProbeResult(ready=False, detail=f"{type(exc).__name__}: {exc}")
    if node_id in brokers:
        return ProbeResult(ready=True, detail=f"broker {node_id} listed")
    return ProbeResult(ready=False, detail=f"Metadata lists brokers {sorted(brokers)}")


def _request(
    sock: socket.socket, api_key: int, version: int, correlation: int, body: bytes
) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, len(_CLIENT_ID)) + _CLIENT_ID
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", _read(sock, 4))[0]
    if not 4 <= size <= _MAX_RESPONSE:  # noqa: PLR2004 - at least the correlation id
        raise _ProtocolError(f"response of {size} bytes")
    response = _read(sock, size)
    if struct.unpack_from(">i", response)[0] != correlation:
        raise _ProtocolError("response to another request")
    return response[4:]


def _read(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise _ProtocolError("connection closed by the broker")
        chunks.extend(chunk)
    return bytes(chunks)


def _api_versions(sock: socket.socket) -> dict[int, tuple[int, int]]:
    body = _request(sock, _API_VERSIONS, 0, 1, b"")
    error, count = struct.unpack_from(">hi", body)
    if error != 0:
        raise _ProtocolError(f"ApiVersions error code {error}")
    versions: dict[int, tuple[int, int]] = {}
    for index in range(count):
        key, low, high = struct.unpack_from(">hhh", body, 6 + 6 * index)
        versions[key] = (low, high)
    return versions


def _metadata_brokers(sock: socket.socket, version: int) -> set[int]:
    body = struct.pack(">ib", 0, 0)  # no topics, do not create any
    if version >= 8:  # noqa: PLR2004 - include_{cluster,topic}_authorized_operations
        body += struct.pack(">bb", 0, 0)
    response = _request(sock, _API_METADATA, version, 2, body)
    offset = 4  # throttle_time_ms
    (count,) = struct.unpack_from(">i", response, offset)
    offset += 4
    brokers: set[int] = set()
    for _ in range(count):
        node, host_len = struct.unpack_from(">ih", response, offset)
        offset += 6 + host_len + 4  # node id, host, port
        (rack_len,) = struct.unpack_from(">h", response, offset)
        offset += 2 + max(rack_len, 0)
        brokers.add(node)
    return brokers
