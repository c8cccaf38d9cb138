"""`spectral tokens`: API tokens for the HTTP API, the web console and the MCP server.

Its own module, apart from `spectral api`: managing tokens needs the database and nothing of the
web stack, so `spectral tokens …` starts without importing FastAPI, uvicorn or the routers.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from spectral.auth.scopes import installed_vocabulary
from spectral.cli._common import fail, run, settings

if TYPE_CHECKING:
    from spectral.auth.tokens import TokenAdmin, TokenInfo

app = typer.Typer(
    help="API tokens for the HTTP API, the web console and the MCP server.", no_args_is_help=True
)


T = TypeVar("T")


def _with_admin(use: Callable[[TokenAdmin], Awaitable[T]]) -> T:
    current = settings()
    # The database driver loads once the settings are good, not for --help.
    from spectral.auth.tokens import TOKEN_ADMIN_ROLE, TokenAdmin  # noqa: PLC0415
    from spectral.db.connect import connect  # noqa: PLC0415
    from spectral.devstack import resolve_database_url  # noqa: PLC0415

    url = resolve_database_url(current)

    async def go() -> T:
        conn = await connect(url, role=TOKEN_ADMIN_ROLE)
        try:
            async with conn.transaction():
                await conn.execute(
                    "SELECT set_config('spectral.actor', $1, true)", f"cli:{_os_user()}"
                )
                return await use(TokenAdmin(conn))
        finally:
            await conn.close()

    return run(go())


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _token_line(info: TokenInfo) -> str:
    state = "revoked" if info.revoked_at else "live"
    expires = f", expires {info.expires_at.isoformat()}" if info.expires_at else ""
    used = info.last_used_at.isoformat() if info.last_used_at else "never"
    return (
        f"{info.name:<24} {info.fingerprint} {state:<7} {' '.join(info.scopes)} "
        f"(created {info.created_at.isoformat()} by {info.created_by}{expires}; last used {used})"
    )


@app.command("create")
def tokens_create(
    name: Annotated[str, typer.Option("--name", help="Who or what uses it (e.g. ops-alice).")],
    scope: Annotated[
        list[str],
        typer.Option(
            "--scope", help=f"Repeat for each: {', '.join(installed_vocabulary().names())}."
        ),
    ],
    expires_in_days: Annotated[
        int | None,
        typer.Option(min=1, max=36500, help="Expire after this many days (default: never)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Create a token and print it ONCE (only its hash is stored)."""
    try:
        scopes = installed_vocabulary().parse(scope)
    except ValueError as exc:
        fail(str(exc), 2)
    expires_at = datetime.now(UTC) + timedelta(days=expires_in_days) if expires_in_days else None
    made = _with_admin(lambda admin: admin.create(name, scopes, expires_at=expires_at))
    if as_json:
        typer.echo(json.dumps({**made.info.to_json(), "token": made.token}, indent=2))
        return
    typer.echo(made.token)
    typer.echo(
        f"token {made.info.name!r} with {' '.join(made.info.scopes)}: shown once, keep it "
        "secret (only its hash is stored)",
        err=True,
    )


@app.command("list")
def tokens_list(
    include_revoked: Annotated[bool, typer.Option("--all", help="Also revoked tokens.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """The tokens (never any part of their secret): name, fingerprint of the hash, scopes,
    creation, last use."""
    found: Sequence[TokenInfo] = _with_admin(
        lambda admin: admin.list(include_revoked=include_revoked)
    )
    if as_json:
        typer.echo(json.dumps([t.to_json() for t in found], indent=2))
        return
    for info in found:
        typer.echo(_token_line(info))


@app.command("revoke")
def tokens_revoke(
    name: Annotated[str, typer.Argument(help="The live token's name (or its token_id).")],
) -> None:
    """Revoke a token: it stops working on the next request."""
    revoked = _with_admin(lambda admin: admin.revoke(name))
    if revoked is None:
        fail(f"no live token named {name!r}")
    typer.echo(f"revoked {revoked.name} ({revoked.fingerprint})")
