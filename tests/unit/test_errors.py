"""One exception hierarchy (spectral/errors.py): every error class the framework and the features
define is a SpectralError — transient, permanent or neither — so a caller can tell spectral's
refusals from defects. (contracts/ imports nothing of spectral: its DecodeError and
CanonicalizationError are ValueErrors; private control-flow signals are not errors.)"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Final

from spectral.errors import SpectralError

ROOT: Final = Path(__file__).resolve().parents[2]


def _modules() -> list[str]:
    found = []
    for top in ("spectral", "producers", "consumers"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.append(".".join(parts))
    return found


def test_every_error_class_is_a_spectral_error() -> None:
    strays = []
    for name in _modules():
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and not attribute.startswith("_")
                and not issubclass(value, SpectralError)
            ):
                strays.append(f"{name}.{attribute}")
    assert strays == []
