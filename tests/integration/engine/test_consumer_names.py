"""The consumer names a role may record (core.consumers_of_current_role(), which row-level
security on the dedup record evaluates for every statement): the consumers registered for a role
the current user is a member of, found by the role's name as written, even one that needs
quoting; a registration naming a role that does not exist, or one the user is not a member of,
gives nothing."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.maintenance.support import PROJECTOR, session

pytestmark = pytest.mark.integration


async def test_a_role_acts_for_the_consumers_registered_for_its_roles(database_url: str) -> None:
    granted = f"Spectral Test.{uuid.uuid4().hex[:8]}"  # mixed case, a space and a dot
    async with session(database_url) as admin:
        await admin.execute(f'CREATE ROLE "{granted}" NOLOGIN')
        try:
            await admin.execute(f'GRANT "{granted}" TO {PROJECTOR}')
            await admin.execute(
                "INSERT INTO core.consumer_roles (consumer, role) VALUES "
                "('quoted-consumer', $1), ('ghost-consumer', $2), ('other-consumer', $3)",
                granted,
                f"no_such_role_{uuid.uuid4().hex[:8]}",
                "spectral_executor",
            )
            async with session(database_url, PROJECTOR) as conn:
                names = await conn.fetchval("SELECT core.consumers_of_current_role()")
            assert sorted(names) == ["quoted-consumer", "rule-candidates"]
        finally:
            await admin.execute(f'DROP ROLE "{granted}"')
