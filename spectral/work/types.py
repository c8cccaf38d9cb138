"""Typing helpers: a connection is either a plain one or a pool's proxy of one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

Conn: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"
