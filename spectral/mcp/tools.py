"""What every spectral MCP tool shares: who is calling, what they may do, and clear errors.

Over streamable HTTP the SDK's bearer middleware verifies ``Authorization: Bearer spt_…`` with
:class:`BearerVerifier` (401 without a valid token) and a tool reads the token's principal; over
stdio the token is the ``SPECTRAL_API_TOKEN`` the server was started with, verified again on
every call (a revoked token stops working at once). A tool whose scope the token lacks fails
with a message naming the scope; expected failures (unknown id, stale version, refused
transition, bad cursor) are tool errors whose text says what to do; anything else is logged and
reported without internals.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar
from uuid import UUID

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ToolError

from spectral.api.problems import ProblemError
from spectral.api.resources import Resources
from spectral.auth.scopes import installed_vocabulary
from spectral.auth.tokens import Principal
from spectral.declaration import Scope
from spectral.errors import PermanentError, TransientError

P = ParamSpec("P")
T = TypeVar("T")


class BearerVerifier:
    """The SDK's ``TokenVerifier``: a spectral API token becomes an ``AccessToken``."""

    def __init__(self, resources: Resources) -> None:
        self._resources = resources

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = await self._resources.verifier.verify(token)
        if principal is None:
            return None
        return AccessToken(
            token=token,
            client_id=principal.name,
            scopes=sorted(principal.scopes),
            subject=str(principal.token_id),
        )


class Caller:
    """Resolves the principal of the current tool call and checks its scope."""

    def __init__(self, resources: Resources, stdio_token: str | None = None) -> None:
        self.resources = resources
        self._stdio_token = stdio_token

    async def require(self, scope: Scope) -> Principal:
        access = get_access_token()
        principal: Principal | None
        if access is not None:
            principal = Principal(
                UUID(access.subject) if access.subject else UUID(int=0),
                access.client_id,
                installed_vocabulary().effective(access.scopes),
            )
        elif self._stdio_token is not None:
            principal = await self.resources.verifier.verify(self._stdio_token)
        else:
            principal = None
        if principal is None:
            raise ToolError("not authenticated: the token is missing, unknown, revoked or expired")
        if not principal.allows(scope):
            raise ToolError(
                f"token {principal.name!r} lacks the scope {scope.name!r} this tool needs"
            )
        return principal


def tool_errors(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Expected failures become tool errors with their message (the model can act on them)."""

    @functools.wraps(fn)
    async def wrapped(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except ToolError:
            raise
        except ProblemError as exc:
            raise ToolError(exc.detail) from exc
        except TransientError as exc:
            raise ToolError("a backing service is unavailable; retry later") from exc
        except PermanentError as exc:
            if exc.__cause__ is not None:  # a driver error: not the caller's to see
                raise
            raise ToolError(str(exc).splitlines()[0][:300]) from exc
        except ValueError as exc:
            raise ToolError(f"invalid argument: {str(exc)[:300]}") from exc

    return wrapped


def parse_uuid(value: str, what: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise ToolError(f"{what} must be a UUID") from None


def as_json(model: Any) -> dict[str, Any]:
    out: dict[str, Any] = model.model_dump(mode="json", by_alias=True)
    return out
