"""Authentication and authorization of HTTP requests.

The JSON API takes ``Authorization: Bearer spt_…`` only. The web console takes the same token
once, on its login form, and keeps it in an HttpOnly, SameSite=Strict cookie; its forms also
carry a CSRF field derived from the token. Every request is checked against the database (a
revoked token stops working at once).

* no token, a malformed one, or one that is unknown, revoked or expired: 401 with
  ``WWW-Authenticate: Bearer`` (problem ``/problems/unauthenticated``);
* a valid token without the operation's scope: 403 naming the scope it needs
  (problem ``/problems/missing-scope``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated, Final

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from spectral.api.problems import ProblemError, ProblemType
from spectral.api.resources import Resources
from spectral.auth.tokens import Principal
from spectral.declaration import Scope

SESSION_COOKIE: Final = "spectral_session"

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    bearerFormat="spt_ token",
    description="An API token made with `spectral tokens create` (sent as a bearer token).",
)


def unauthenticated(detail: str, *, token_given: bool) -> ProblemError:
    challenge = 'Bearer realm="spectral"'
    if token_given:
        challenge += ', error="invalid_token"'
    return ProblemError(
        401,
        detail,
        slug=ProblemType.UNAUTHENTICATED,
        headers={"WWW-Authenticate": challenge},
    )


def missing_scope(principal: Principal, scope: Scope) -> ProblemError:
    return ProblemError(
        403,
        f"token {principal.name!r} lacks the scope {scope.name!r} this operation needs",
        slug=ProblemType.MISSING_SCOPE,
        required_scope=scope.name,
        granted_scopes=sorted(principal.scopes),
    )


async def verify(resources: Resources, token: str | None) -> Principal:
    if not token:
        raise unauthenticated(
            "this operation needs a token: send 'Authorization: Bearer spt_…'", token_given=False
        )
    principal = await resources.verifier.verify(token)
    if principal is None:
        raise unauthenticated("the token is unknown, revoked or expired", token_given=True)
    return principal


def requires(
    resources: Resources, scope: Scope | None
) -> Callable[[HTTPAuthorizationCredentials | None], Awaitable[Principal]]:
    """A dependency: the bearer token's principal, which must hold ``scope`` (None: any valid
    token; the operation then checks the scope it needs itself)."""

    async def check(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    ) -> Principal:
        principal = await verify(resources, credentials.credentials if credentials else None)
        if scope is not None and not principal.allows(scope):
            raise missing_scope(principal, scope)
        return principal

    return check


def csrf_token(session_token: str) -> str:
    """The console's CSRF field: unguessable without the (HttpOnly) session token."""
    return hmac.new(session_token.encode(), b"spectral-console-csrf", hashlib.sha256).hexdigest()


def session_token(request: Request) -> str | None:
    return request.cookies.get(SESSION_COOKIE)


ConsoleAuth = Callable[[Request], Awaitable[Principal]]


def console_requires(resources: Resources, scope: Scope | None = None) -> ConsoleAuth:
    """A dependency of console pages: the session cookie's principal (holding ``scope``)."""

    async def check(request: Request) -> Principal:
        principal = await verify(resources, session_token(request))
        if scope is not None and not principal.allows(scope):
            raise missing_scope(principal, scope)
        return principal

    return check


def check_csrf(request: Request, given: str | None) -> None:
    token = session_token(request)
    if not token or not given or not hmac.compare_digest(csrf_token(token), given):
        raise ProblemError(403, "the form's CSRF field is missing or wrong", slug=ProblemType.CSRF)
