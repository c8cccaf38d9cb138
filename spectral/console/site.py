"""Console core: templates, login/logout with the session cookie, HTML error pages.

Login takes an API token once and keeps it in an HttpOnly, SameSite=Strict cookie scoped to
``/console`` (Secure over HTTPS); every page verifies it against the database, so revoking the
token logs the browser out. Forms that change anything carry a CSRF field derived from the
token (spectral/api/auth.py). A page the token's scopes do not allow answers 403 with a page
saying which scope is missing; no session redirects to the login page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from http import HTTPStatus
from importlib import resources as package_files
from typing import Annotated, Any, Final
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import ChoiceLoader, Environment, PackageLoader, select_autoescape
from starlette.exceptions import HTTPException as StarletteHTTPException

from spectral.api.auth import SESSION_COOKIE, check_csrf, csrf_token, session_token
from spectral.api.problems import ProblemError, ProblemType, invalid_params
from spectral.api.resources import Resources
from spectral.api.text import reveal
from spectral.auth.tokens import Principal
from spectral.declaration import NavEntry

PREFIX: Final = "/console"
STATIC: Final = f"{PREFIX}/_static"
SESSION_SECONDS: Final = 8 * 3600
PAGE_HEADERS: Final = {
    # No script at all, styles only from the console's stylesheet, forms only to itself, never
    # framed (clickjacking), and pages that show triage state and threads are never cached.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make browsers post Origin: null
    "Cache-Control": "no-store",
}


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "—"


class Console:
    """The console's shell: its templates (the framework's and those of ``template_packages``),
    the navigation bar (``nav``: the plugins' entries and the operations', by order; the first
    is the home page) and the pages' common handling."""

    def __init__(
        self,
        resources: Resources,
        template_packages: Sequence[str] = (),
        nav: Sequence[NavEntry] = (),
    ) -> None:
        self.resources = resources
        entries = sorted(nav, key=lambda entry: (entry.order, entry.label))
        self.nav = tuple((e.key, e.label, f"{PREFIX}{e.path}") for e in entries)
        self.home = self.nav[0][2] if self.nav else f"{PREFIX}/login"
        loaders = [PackageLoader("spectral.console", "templates")]
        loaders += [PackageLoader(package, "templates") for package in template_packages]
        self.env = Environment(
            loader=ChoiceLoader(loaders),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["when"] = _when
        self.env.filters["visible"] = reveal

    def page(
        self,
        request: Request,
        template: str,
        principal: Principal | None,
        *,
        status_code: int = 200,
        section: str = "",
        **context: Any,
    ) -> HTMLResponse:
        token = session_token(request)
        html = self.env.get_template(template).render(
            request=request,
            principal=principal,
            csrf=csrf_token(token) if token else "",
            nav=self.nav,
            home=self.home,
            section=section,
            prefix=PREFIX,
            static=STATIC,
            **context,
        )
        return HTMLResponse(html, status_code=status_code, headers=PAGE_HEADERS)

    def router(self) -> APIRouter:
        router = APIRouter(prefix=PREFIX, include_in_schema=False)

        @router.get("")
        @router.get("/")
        async def console_home() -> RedirectResponse:
            return RedirectResponse(self.home, status_code=303)

        @router.get("/login")
        async def console_login_form(request: Request, next: str = "") -> HTMLResponse:  # noqa: A002
            return self.page(request, "login.html", None, next=_local(next))

        @router.post("/login")
        async def console_login(
            request: Request,
            token: Annotated[str, Form(max_length=300)],
            next: Annotated[str, Form(max_length=2000)] = "",  # noqa: A002
        ) -> Response:
            same_origin(request)
            principal = await self.resources.verifier.verify(token.strip())
            if principal is None:
                return self.page(
                    request,
                    "login.html",
                    None,
                    status_code=401,
                    next=_local(next),
                    error="That token is unknown, revoked or expired.",
                )
            response = RedirectResponse(_local(next) or self.home, status_code=303)
            response.set_cookie(
                SESSION_COOKIE,
                token.strip(),
                max_age=SESSION_SECONDS,
                path=PREFIX,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
            return response

        @router.post("/logout")
        async def console_logout(
            request: Request, csrf: Annotated[str, Form(max_length=200)] = ""
        ) -> RedirectResponse:
            check_csrf(request, csrf)
            response = RedirectResponse(f"{PREFIX}/login", status_code=303)
            response.delete_cookie(SESSION_COOKIE, path=PREFIX)
            return response

        return router

    def install(self, app: FastAPI) -> None:
        """Mount the stylesheet and the pages; errors under /console become HTML pages."""
        static = package_files.files("spectral.console") / "static"
        app.mount(STATIC, StaticFiles(directory=str(static)), name="console-static")
        app.include_router(self.router())
        self._html_errors(app)

    def _html_errors(self, app: FastAPI) -> None:
        handlers: Mapping[Any, Callable[..., Awaitable[Response]]] = dict(app.exception_handlers)
        json_problem = handlers[ProblemError]
        json_invalid = handlers[RequestValidationError]
        json_http = handlers[StarletteHTTPException]

        async def problem(request: Request, exc: Exception) -> Response:
            if not request.url.path.startswith(PREFIX) or not isinstance(exc, ProblemError):
                return await json_problem(request, exc)
            if exc.status == 401:  # noqa: PLR2004
                target = quote(
                    request.url.path + (f"?{request.url.query}" if request.url.query else "")
                )
                response = RedirectResponse(f"{PREFIX}/login?next={target}", status_code=303)
                response.delete_cookie(SESSION_COOKIE, path=PREFIX)
                return response
            return self.page(
                request,
                "problem.html",
                None,
                status_code=exc.status,
                signed_in=session_token(request) is not None,
                title=exc.title,
                detail=exc.detail,
                extensions=exc.extensions,
            )

        async def invalid(request: Request, exc: Exception) -> Response:
            if not request.url.path.startswith(PREFIX) or not isinstance(
                exc, RequestValidationError
            ):
                return await json_invalid(request, exc)
            return self.page(
                request,
                "problem.html",
                None,
                status_code=422,
                signed_in=session_token(request) is not None,
                title="Invalid request",
                detail="Part of the request is not valid.",
                extensions={"invalid_params": invalid_params(exc.errors())},
            )

        async def http_error(request: Request, exc: Exception) -> Response:
            if not request.url.path.startswith(PREFIX) or not isinstance(
                exc, StarletteHTTPException
            ):
                return await json_http(request, exc)
            response = self.page(
                request,
                "problem.html",
                None,
                status_code=exc.status_code,
                signed_in=session_token(request) is not None,
                title=HTTPStatus(exc.status_code).phrase,
                detail="There is no such page in the console."
                if exc.status_code == 404  # noqa: PLR2004
                else (exc.detail if isinstance(exc.detail, str) else ""),
                extensions={},
            )
            response.headers.update(exc.headers or {})
            return response

        app.add_exception_handler(ProblemError, problem)
        app.add_exception_handler(RequestValidationError, invalid)
        app.add_exception_handler(StarletteHTTPException, http_error)


def same_origin(request: Request) -> None:
    """Refuse a form another site posted (403): the login form has no session to derive a CSRF
    field from, so a page elsewhere could log a browser in with the attacker's token — whose
    name the audit trail would then record for the victim's changes. Browsers send ``Origin``
    with every cross-site POST; a request without one (curl, old clients) is let through.

    ``Host`` is the host the browser asked for: behind a trusted proxy it was rewritten from
    ``X-Forwarded-Host`` (spectral/api/proxy.py); from anyone else that header never gets here.
    """
    origin = request.headers.get("origin")
    if origin is None:
        return
    if origin == "null" or urlsplit(origin).netloc != request.headers.get("host"):
        raise ProblemError(
            403, "the form was posted from another site", slug=ProblemType.CROSS_ORIGIN
        )


def _local(target: str) -> str:
    """Only a path inside the console (no open redirect to another site)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(PREFIX + "/"):
        return ""
    if "\\" in target or "//" in parts.path:
        return ""
    return target


CsrfField = Annotated[str, Form(max_length=200)]


def require_csrf(request: Request, csrf: str) -> None:
    check_csrf(request, csrf)
