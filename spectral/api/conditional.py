"""Conditional requests (RFC 9110 §13): entity tags as the API writes them and reads them back.

Resources that carry a version answer with ``ETag: "N"`` (N its version, ASCII digits). Reading
``If-Match`` and ``If-None-Match`` never fails on what a client sends: a list of tags is split
on commas, and a tag is a version only when it is ``"N"`` with N made of 1 to 18 ASCII digits
(``str.isdigit`` would let superscripts and other scripts' digits through, which ``int`` then
refuses). Anything else names no version.
"""

from __future__ import annotations

import re
from typing import Any, Final

from fastapi import Response

_TAG: Final = re.compile(r'(W/)?"([0-9]{1,18})"', re.ASCII)
ANY: Final = "*"


def etag_of(version: int) -> str:
    return f'"{version}"'


def versions_in(value: str, *, strong_only: bool = False) -> tuple[bool, list[int]]:
    """(whether the header says ``*``, the versions its tags name); ``strong_only`` for
    If-Match, which compares strongly (RFC 9110 §13.1.1): a weak tag names nothing there."""
    wildcard = False
    versions: list[int] = []
    for part in value.split(","):
        tag = part.strip(" \t")
        if tag == ANY:
            wildcard = True
            continue
        found = _TAG.fullmatch(tag)
        if found is not None and not (strong_only and found.group(1)):
            versions.append(int(found.group(2)))
    return wildcard, versions


def not_modified(if_none_match: str | None, version: int) -> bool:
    """Whether ``If-None-Match`` matches ``version`` (weak comparison, RFC 9110 §13.1.2)."""
    if if_none_match is None:
        return False
    wildcard, versions = versions_in(if_none_match)
    return wildcard or version in versions


def not_modified_response(version: int) -> Response:
    """304 with the ETag (and nothing else) for a client whose copy is current."""
    return Response(status_code=304, headers={"ETag": etag_of(version)})


ETAG_HEADER: Final[dict[str, Any]] = {
    "ETag": {"description": 'The version, e.g. "3" (for If-Match).', "schema": {"type": "string"}}
}
"""The OpenAPI header object of an ``ETag``."""

NOT_MODIFIED: Final[dict[int | str, dict[str, Any]]] = {
    304: {
        "description": "If-None-Match names the current version: the copy the client holds is "
        "current (no body).",
        "headers": ETAG_HEADER,
    }
}
"""The OpenAPI response of a 304."""
