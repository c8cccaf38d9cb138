from __future__ import annotations

import json
from pathlib import Path

import pytest

from spectral.errors import ConfigurationError
from spectral.llm.router import ModelRouter, RouteError
from spectral.settings import load_settings

ROUTES = {
    "story_generate": "m-story",
    "org-1/story_generate": "m-story-org1",
    "org-2/*": "m-org2",
    "*": "m-default",
}


@pytest.mark.parametrize(
    ("function_key", "org", "model", "route"),
    [
        ("story_generate", None, "m-story", "story_generate"),
        ("story_generate", "org-1", "m-story-org1", "org-1/story_generate"),
        ("story_generate", "org-2", "m-story", "story_generate"),
        ("rule_stub", "org-2", "m-org2", "org-2/*"),
        ("rule_stub", "org-3", "m-default", "*"),
        ("rule_stub", None, "m-default", "*"),
    ],
)
def test_the_most_specific_route_wins(
    function_key: str, org: str | None, model: str, route: str
) -> None:
    resolved = ModelRouter(ROUTES).resolve(function_key, org)
    assert (resolved.model, resolved.route) == (model, route)


def test_no_route_is_a_configuration_error() -> None:
    with pytest.raises(RouteError, match="rule_stub"):
        ModelRouter({"story_generate": "m"}).resolve("rule_stub")
    assert issubclass(RouteError, ConfigurationError)


def test_bad_routes_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        ModelRouter({"a/b/c": "m"})
    with pytest.raises(ConfigurationError):
        ModelRouter({"a": " "})


def test_settings_routes_override_the_routes_file(tmp_path: Path) -> None:
    routes_file = tmp_path / "routes.json"
    routes_file.write_text(json.dumps({"*": "file-default", "story_generate": "file-story"}))
    settings = load_settings(
        llm_routes_file=routes_file, llm_routes={"story_generate": "env-story"}
    )
    router = ModelRouter.from_settings(settings)
    assert router.resolve("story_generate").model == "env-story"
    assert router.resolve("other").model == "file-default"


def test_a_broken_routes_file_is_a_configuration_error(tmp_path: Path) -> None:
    broken = tmp_path / "routes.json"
    broken.write_text("[1, 2]")
    with pytest.raises(ConfigurationError, match="JSON object"):
        ModelRouter.from_settings(load_settings(llm_routes_file=broken))
