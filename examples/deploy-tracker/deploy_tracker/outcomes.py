"""The read side every surface of the plugin shares: deploys per service and outcome."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict

from spectral.extend import Conn, load_queries

_SQL: Final = load_queries(Path(__file__).with_name("queries.sql"))


class Outcome(BaseModel):
    """How many deploys of one service ended one way, and when the last one did."""

    model_config = ConfigDict(frozen=True)

    service: str
    outcome: str
    deploys: int
    last_at: datetime


async def outcomes(conn: Conn, service: str | None = None) -> list[Outcome]:
    """Every service's outcomes (or one service's), by service then outcome."""
    rows = await conn.fetch(_SQL["outcomes"], service)
    return [Outcome.model_validate(dict(row)) for row in rows]
