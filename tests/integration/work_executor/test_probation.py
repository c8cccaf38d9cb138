"""Route probation against the real database (issue 23): a new model route takes one call at a
time until its first bill settles within its reservation, then as many as its limits allow; an
operator's resume puts a route back on probation."""

from __future__ import annotations

import pytest

from producers.work.commands import GenerateAll
from producers.work.routes import list_routes
from spectral.llm.limits import ProviderLimits
from spectral.llm.seam import SynthesisRequest, SynthesisResponse
from spectral.settings import Settings
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    ScriptedSynthesizer,
    backlog,
    executor,
    executor_settings,
    harness,
    run_until_settled,
)

pytestmark = pytest.mark.integration


class WatchingGateway(ScriptedSynthesizer):
    """The scripted model, noting when each call starts and ends."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        self.events.append(("start", request.idempotency_key))
        try:
            return await super().synthesize(request)
        finally:
            self.events.append(("end", request.idempotency_key))


async def test_a_new_route_takes_one_call_until_its_first_bill_settles_then_its_concurrency(
    database_url: str, settings: Settings
) -> None:
    gateway = WatchingGateway()
    async with (
        harness(database_url) as h,
        executor(
            executor_settings(settings),
            database_url,
            gateway,
            limits=ProviderLimits.parse({"m": {"max_tokens": 100, "concurrency": 4}}),
            resolve=lambda _f, _o: "m",
        ) as handler,
    ):
        await h.commands.put_document(
            PROJECT, DOCUMENT, backlog(*(f"E {n} [slow:0.3]" for n in range(9)))
        )
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        await run_until_settled(handler, h.admin)

        # The first call ran alone: it ended before any other started.
        assert [kind for kind, _ in gateway.events[:2]] == ["start", "end"]
        # Then the route was proven: its concurrency was used.
        assert gateway.most_in_flight > 1
        assert gateway.total == 9
        [route] = await list_routes(h.admin)
        assert (route.model, route.probation) == ("m", False)
