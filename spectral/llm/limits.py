"""Provider limits and prices per model route, from configuration only (beside the router).

A gateway limits how many calls of a model run at once and how many requests and tokens it
takes per minute, and charges per token. The work executor schedules within these limits (a
call waits for capacity *before* its attempt starts, so waiting is never an attempt), reserves
each call's cost against its org's budget before the call, and sends ``max_tokens`` so the
reservation is a true upper bound.

Configuration: ``SPECTRAL_LLM_LIMITS`` (JSON) and/or the ``"limits"`` object of the routes
file (``SPECTRAL_LLM_ROUTES_FILE`` may then be ``{"routes": {...}, "limits": {...}}``), keyed
by model, with ``"*"`` as the default of models not listed::

    {"gpt-4o-mini": {"concurrency": 32, "rpm": 3000, "tpm": 2000000, "max_tokens": 1024,
                     "prompt_price": "0.15", "completion_price": "0.60"},
     "*": {"concurrency": 8}}

* ``concurrency``  calls in flight at once, across every executor replica;
* ``rpm``, ``tpm``  requests and tokens per minute (token buckets that refill continuously and
  hold at most ``burst_seconds`` worth, default 1 s: gateways enforce "per minute" limits in
  small slices, so a minute's requests sent in one second are refused);
* ``max_tokens``   the completion cap sent with every call of the model;
* ``prompt_price``, ``completion_price``  cost per 1,000,000 tokens, in the unit budgets use.

Every field is optional; a model with no limits is only limited by the executor's pool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from spectral.errors import ConfigurationError
from spectral.llm.settings import LlmSettings
from spectral.settings import Settings

WILDCARD: Final = "*"
PER_TOKENS: Final = Decimal(1_000_000)
MAX_BURST_SECONDS: Final = 60.0
_INTEGER_FIELDS: Final = ("concurrency", "rpm", "tpm", "max_tokens")
_PRICE_FIELDS: Final = ("prompt_price", "completion_price")
_FIELDS: Final = frozenset({*_INTEGER_FIELDS, *_PRICE_FIELDS, "burst_seconds"})


@dataclass(frozen=True)
class RouteLimits:
    concurrency: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_tokens: int | None = None
    prompt_price: Decimal = Decimal(0)
    completion_price: Decimal = Decimal(0)
    burst_seconds: float = 1.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> Decimal:
        """What a call that used these tokens costs."""
        return (
            Decimal(prompt_tokens) * self.prompt_price
            + Decimal(completion_tokens) * self.completion_price
        ) / PER_TOKENS

    @classmethod
    def parse(cls, model: str, raw: Any) -> RouteLimits:
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"llm limits of {model!r}: expected a JSON object")
        unknown = set(raw) - _FIELDS
        if unknown:
            raise ConfigurationError(
                f"llm limits of {model!r}: unknown {', '.join(sorted(map(str, unknown)))} "
                f"(known: {', '.join(sorted(_FIELDS))})"
            )
        values: dict[str, Any] = {}
        for name in _INTEGER_FIELDS:
            value = raw.get(name)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"llm limits of {model!r}: {name} must be an integer >= 1")
            values[name] = value
        for name in _PRICE_FIELDS:
            if raw.get(name) is None:
                continue
            values[name] = _price(model, name, raw[name])
        burst = raw.get("burst_seconds")
        if burst is not None:
            if (
                isinstance(burst, bool)
                or not isinstance(burst, (int, float))
                or not 0 < burst <= MAX_BURST_SECONDS
            ):
                raise ConfigurationError(
                    f"llm limits of {model!r}: burst_seconds must be a number in (0, 60]"
                )
            values["burst_seconds"] = float(burst)
        return cls(**values)


def _price(model: str, name: str, value: Any) -> Decimal:
    try:
        price = Decimal(str(value)) if not isinstance(value, bool) else Decimal("NaN")
    except InvalidOperation:
        price = Decimal("NaN")
    if not price.is_finite() or price < 0:
        raise ConfigurationError(f"llm limits of {model!r}: {name} must be a number >= 0")
    return price


@dataclass(frozen=True)
class ProviderLimits:
    """Limits by model, ``"*"`` the default of models not listed."""

    by_model: Mapping[str, RouteLimits] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_model", MappingProxyType(dict(self.by_model)))

    def for_model(self, model: str | None) -> RouteLimits:
        if model is not None and model in self.by_model:
            return self.by_model[model]
        return self.by_model.get(WILDCARD, RouteLimits())

    @classmethod
    def from_settings(cls, settings: Settings) -> ProviderLimits:
        """The limits of the routes file, overridden model by model by ``llm_limits``."""
        raw: dict[str, Any] = {}
        llm = LlmSettings.of(settings)
        if llm.llm_routes_file is not None:
            raw.update(load_llm_file(llm.llm_routes_file)[1])
        raw.update(llm.llm_limits)
        return cls.parse(raw)

    @property
    def models(self) -> frozenset[str]:
        return frozenset(m for m in self.by_model if m != WILDCARD)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> ProviderLimits:
        parsed: dict[str, RouteLimits] = {}
        for model, limits in raw.items():
            if not isinstance(model, str) or not model.strip():
                raise ConfigurationError("llm limits: every key must be a model name or '*'")
            parsed[model] = RouteLimits.parse(model, limits)
        return cls(parsed)


def load_llm_file(path: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """The routes file: a JSON object of routes, or ``{"routes": {...}, "limits": {...}}``.
    Returns (routes, raw limits)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"llm routes file {path}: {exc}") from exc
    structured = (
        isinstance(data, dict)
        and bool(set(data) & {"routes", "limits"})
        and all(isinstance(value, dict) for value in data.values())
    )
    if structured:
        routes, limits = data.get("routes", {}), data.get("limits", {})
    else:
        routes, limits = data, {}
    if not isinstance(routes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in routes.items()
    ):
        raise ConfigurationError(f"llm routes file {path}: expected a JSON object of strings")
    if not isinstance(limits, dict):
        raise ConfigurationError(f"llm routes file {path}: 'limits' must be a JSON object")
    return routes, limits
