"""The app factory of the HTTP surface: one FastAPI app for the JSON API and the web console.

``/healthz`` and ``/readyz`` are not routes of this app: spectral/observability/health.py answers
them in front of it (unauthenticated, outside the OpenAPI document), as for every long-running
command.

``build_app`` takes ready routers (each built beside its domain, composed in spectral/cli/api.py),
wraps them in the forwarded-header filter (spectral/api/proxy.py), the request guard, problem
documents for every error, an OpenAPI document that
names every operation and status, and interactive docs whose assets are served by the app itself
(``/docs`` and ``/redoc`` load nothing from a CDN).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from importlib import resources as package_files
from typing import Any, Final

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from spectral.api import problems
from spectral.api.guard import DEFAULT_MAX_BODY_BYTES, RequestGuard
from spectral.api.proxy import ForwardedHeaders, TrustedProxies
from spectral.api.resources import Resources
from spectral.api.settings import ApiSettings

DOCS_ASSETS: Final = "/_assets/docs"


def operation_id(route: APIRoute) -> str:
    """Operation ids are the route functions' names (unique across the app; a test checks)."""
    return route.name


def build_app(
    resources: Resources,
    *,
    routers: Sequence[APIRouter],
    title: str = "spectral",
    description: str = "",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    extra_setup: Sequence[Any] = (),
) -> FastAPI:
    """The app; ``extra_setup`` are callables ``(app) -> None`` run last (e.g. the console)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await resources.open()
        try:
            yield
        finally:
            await resources.close()

    app = FastAPI(
        title=title,
        version="1",
        description=description,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
        # Relative: the API answers wherever it is served (behind a proxy, under its host).
        servers=[{"url": "/", "description": "This server."}],
        license_info={"name": "Apache-2.0", "identifier": "Apache-2.0"},
        separate_input_output_schemas=False,
    )
    problems.install(app)
    for router in routers:
        app.include_router(router)
    _docs(app)
    _register_problem_schema(app)
    for setup in extra_setup:
        setup(app)
    app.add_middleware(RequestGuard, max_body_bytes=max_body_bytes)
    trusted = TrustedProxies(ApiSettings.of(resources.settings).forwarded_allow_ips)
    app.add_middleware(ForwardedHeaders, trusted=trusted)  # outermost: before anything reads
    return app


def _docs(app: FastAPI) -> None:
    static = package_files.files("fastapi_offline") / "static"
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(static)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} — API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} — API",
            redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )


def _register_problem_schema(app: FastAPI) -> None:
    """Add the Problem schema to the generated document (routes refer to it by $ref)."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["Problem"] = problems.Problem.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
        defs = components["Problem"].pop("$defs", {})
        components.update(defs)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
