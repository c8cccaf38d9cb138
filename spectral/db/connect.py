"""Connections and pools, with driver errors translated to spectral's error classes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import asyncpg

from spectral.db.array_checks import install as install_array_checks
from spectral.errors import ConfigurationError, PermanentError, SpectralError, TransientError
from spectral.faults import is_configuration, is_transient

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

T = TypeVar("T")

Conn: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"
"""A connection, or one a pool lends (the caller's transaction either way): what repositories,
the outbox writer and handlers take."""


def translate(exc: BaseException, what: str) -> SpectralError:
    """Wrap a driver exception as TransientError, ConfigurationError or PermanentError."""
    if is_configuration(exc):
        return ConfigurationError(
            f"{what}: the database refused the settings ({type(exc).__name__}: {exc}); check "
            "SPECTRAL_DATABASE_URL (user, password, database)"
        )
    if is_transient(exc):
        return TransientError(f"{what}: database unavailable ({type(exc).__name__}: {exc})")
    return PermanentError(f"{what}: {type(exc).__name__}: {exc}")


def _translate_login(exc: BaseException, what: str, role: str | None) -> SpectralError:
    """``translate``, and a login that may not act as ``role`` is a configuration error too:
    the deployment's login lacks the grant docs/howto/deploy/production.md asks for."""
    if role and isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return ConfigurationError(
            f"{what}: the database login may not act as the role {role} ({exc}); grant it: "
            f"GRANT {role} TO <the login of SPECTRAL_DATABASE_URL>"
        )
    return translate(exc, what)


async def connect(
    dsn: str, *, role: str | None = None, connect_timeout: float = 10.0
) -> asyncpg.Connection:
    """One connection; ``role`` makes the session act as that database role from the start."""
    settings = {"role": role} if role else None
    try:
        conn: asyncpg.Connection = await asyncpg.connect(
            dsn, server_settings=settings, timeout=connect_timeout
        )
    except Exception as exc:
        raise _translate_login(exc, "connect", role) from exc
    return conn


async def ping(dsn: str, *, seconds: float = 5.0) -> None:
    """Connect, ``SELECT 1``, disconnect: a readiness probe for processes without a pool."""
    conn = await connect(dsn, connect_timeout=seconds)
    try:
        await conn.fetchval("SELECT 1", timeout=seconds)
    finally:
        await conn.close()


async def close_session(conn: asyncpg.Connection) -> None:
    """End a session (the server releases its session locks with it); a session that cannot
    close cleanly (the server is gone, the connection broken) is terminated instead."""
    if conn.is_closed():
        return
    try:
        await conn.close(timeout=5)
    except Exception:  # noqa: BLE001 - closing a broken session: terminate it instead
        conn.terminate()


async def create_pool(
    dsn: str,
    *,
    role: str | None = None,
    min_size: int = 1,
    max_size: int = 4,
    connect_timeout: float = 10.0,
    session: Mapping[str, str] | None = None,
    reset: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
) -> asyncpg.Pool:
    """A connection pool whose sessions act as ``role`` (when given), with the ``session``
    settings (e.g. ``lock_timeout``) on every connection; ``reset``: what resets a connection
    given back (asyncpg's ``Connection.reset()`` when None)."""
    settings = {**(session or {}), **({"role": role} if role else {})} or None
    install_array_checks()  # every array parameter checked without a Python frame per element
    try:
        pool: asyncpg.Pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            server_settings=settings,
            timeout=connect_timeout,
            command_timeout=60,
            reset=reset,
        )
    except Exception as exc:
        raise _translate_login(exc, "create pool", role) from exc
    return pool


@asynccontextmanager
async def pooled(
    dsn: str, *, role: str | None = None, max_size: int = 4
) -> AsyncIterator[asyncpg.Pool]:
    """``async with pooled(dsn) as pool`` — a pool closed on exit."""
    pool = await create_pool(dsn, role=role, max_size=max_size)
    try:
        yield pool
    finally:
        await pool.close()


async def guarded(what: str, operation: Callable[[], Awaitable[T]]) -> T:
    """Await ``operation`` translating driver errors (for repository methods)."""
    try:
        return await operation()
    except SpectralError:
        raise
    except Exception as exc:
        raise translate(exc, what) from exc
