"""Function key (and optional org) -> model, from configuration only.

Business code names a *function* ("story_generate"), never a model. Routes come from settings
(``SPECTRAL_LLM_ROUTES``, a JSON object) and/or a JSON routes file; the most specific route wins:

1. ``"{org_id}/{function_key}"`` — an org's override of one function;
2. ``"{function_key}"``;
3. ``"{org_id}/*"`` — an org's default;
4. ``"*"`` — the platform default.

No route -> ``RouteError`` (a ``ConfigurationError``: retrying cannot help). The limits and
prices of each model (concurrency, requests and tokens per minute, max_tokens) are configured
beside the routes: spectral/llm/limits.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from spectral.errors import ConfigurationError
from spectral.llm.limits import load_llm_file
from spectral.llm.settings import LlmSettings
from spectral.settings import Settings

WILDCARD = "*"


class RouteError(ConfigurationError):
    """No model is configured for a function key (and org)."""


@dataclass(frozen=True)
class ResolvedModel:
    """The model a call goes to, and the route that chose it (for logs and ledger entries)."""

    model: str
    route: str


class ModelRouter:
    """Resolves ``(function_key, org_id)`` to a model with the precedence in the module doc."""

    def __init__(self, routes: Mapping[str, str]) -> None:
        for key, model in routes.items():
            if not key or not isinstance(model, str) or not model.strip():
                raise ConfigurationError(f"llm route {key!r}: the model must be a non-empty text")
            if key.count("/") > 1:
                raise ConfigurationError(f"llm route {key!r}: use 'function' or 'org/function'")
        self._routes = MappingProxyType(dict(routes))

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelRouter:
        """Routes of the routes file, overridden by ``llm_routes``."""
        routes: dict[str, str] = {}
        llm = LlmSettings.of(settings)
        if llm.llm_routes_file is not None:
            routes.update(load_routes_file(llm.llm_routes_file))
        routes.update(llm.llm_routes)
        return cls(routes)

    @property
    def routes(self) -> Mapping[str, str]:
        return self._routes

    def resolve(self, function_key: str, org_id: str | None = None) -> ResolvedModel:
        candidates = []
        if org_id:
            candidates.append(f"{org_id}/{function_key}")
        candidates.append(function_key)
        if org_id:
            candidates.append(f"{org_id}/{WILDCARD}")
        candidates.append(WILDCARD)
        for key in candidates:
            model = self._routes.get(key)
            if model is not None:
                return ResolvedModel(model=model, route=key)
        raise RouteError(
            f"no model configured for function {function_key!r}"
            + (f" (org {org_id!r})" if org_id else "")
            + ": add it to SPECTRAL_LLM_ROUTES or the routes file, or a '*' default"
        )


def load_routes_file(path: Path) -> dict[str, str]:
    """Read the routes of a routes file (a JSON object of routes, or one with ``routes`` and
    ``limits``: spectral/llm/limits.py); anything else is a configuration error."""
    return load_llm_file(path)[0]
