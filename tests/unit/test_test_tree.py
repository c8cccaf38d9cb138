"""The tests mirror the source tree inside each kind: the tests of ``spectral/engine/`` are in
``tests/<kind>/engine/``, of ``consumers/work_executor/`` in ``tests/<kind>/work_executor/``, of
``producers/work/domain/`` in ``tests/<kind>/work/domain/`` (a source path without its top folder),
and those of a module directly in ``spectral/`` (``plugins.py``) in ``tests/<kind>/plugins/``.
Tests of the whole house (the layers, the wheel, the deployment files) sit at the top of a kind."""

from __future__ import annotations

from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
KINDS: Final = ("unit", "integration", "faults")
SOURCES: Final = ("spectral", "contracts", "producers", "consumers")


def _mirrors(relative: Path) -> bool:
    places = [ROOT / relative] if relative.parts[0] == "contracts" else []
    places += [ROOT / top / relative for top in SOURCES]
    return any(any(place.glob("*.py")) or place.with_suffix(".py").is_file() for place in places)


def test_every_test_folder_mirrors_a_source_folder() -> None:
    strays = [
        str(folder.relative_to(ROOT))
        for kind in KINDS
        for folder in sorted({path.parent for path in (ROOT / "tests" / kind).rglob("test_*.py")})
        if folder != ROOT / "tests" / kind
        and not _mirrors(folder.relative_to(ROOT / "tests" / kind))
    ]
    assert strays == []


def test_a_folder_named_after_nothing_is_a_stray() -> None:
    assert not _mirrors(Path("consumer"))
    assert _mirrors(Path("engine"))
    assert _mirrors(Path("work/domain"))
