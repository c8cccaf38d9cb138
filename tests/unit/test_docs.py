"""The documentation tells the truth about the code: the generated reference pages are current,
every ``SPECTRAL_*`` variable and every metric the code has is documented, every decision record
the code cites exists with the cited section, the README stays short and its links resolve, and
pages that use a word with two meanings here link to the glossary."""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
from functools import cache
from pathlib import Path
from typing import Final

import pytest

from docs.gen import DOCS, ROOT, pages
from docs.gen import metrics as metrics_page
from docs.gen import settings as settings_page

README: Final = ROOT / "README.md"
README_MAX_LINES: Final = 250


@pytest.mark.parametrize("page", sorted(pages()))
def test_a_generated_page_is_what_the_code_generates(page: str) -> None:
    committed = (DOCS / page).read_text("utf-8")
    assert committed == pages()[page](), (
        f"docs/{page} differs from what the code generates: run `make docs-generate`"
    )


def test_every_spectral_variable_the_code_reads_is_in_the_settings_reference() -> None:
    read = settings_page.read_by(settings_page.SOURCES) | settings_page.read_by(
        settings_page.TEST_SOURCES
    )
    page = (DOCS / "reference" / "settings.md").read_text("utf-8")
    assert read, "the scan found no variable at all"
    assert sorted(v for v in read if f"`{v}`" not in page) == []


def test_a_variable_read_but_not_documented_stops_the_generator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(settings_page, "OUTSIDE_SETTINGS", {})
    with pytest.raises(SystemExit, match="SPECTRAL_WORK_CRASH_AT"):
        settings_page.render()


_METRIC_CONSTRUCTORS: Final = {"Counter", "Gauge", "Histogram", "Summary", "BatchHistogram"}


def _metric_names_in_the_code() -> set[str]:
    names: set[str] = set()
    for folder in metrics_page.PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if not (isinstance(node, ast.Call) and node.args):
                    continue
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                first = node.args[0]
                if called in _METRIC_CONSTRUCTORS and isinstance(first, ast.Constant):
                    name = str(first.value)
                    if called == "Counter" and not name.endswith("_total"):
                        name += "_total"
                    names.add(name)
    return names


def test_every_metric_the_code_makes_is_in_the_metrics_reference() -> None:
    in_code = _metric_names_in_the_code()
    documented = set(metrics_page.collect())
    assert len(in_code) > 40
    assert sorted(in_code - documented) == []


# -- decision records ------------------------------------------------------------------------------

_CITATION: Final = re.compile(
    r"ADR-(?P<number>\d+)(?P<sections>(?:[ ,]*(?:§\s*\d+(?:\.\d+)*|D\d+\b))*)(?P<risk> open risk)?"
)
_SECTION: Final = re.compile(r"§\s*(\d+(?:\.\d+)*)|D(\d+)")
_ANCHOR: Final = re.compile(r"\{#([\w-]+)\}")


@cache
def _records() -> dict[str, Path]:
    """Decision records by the number the code cites them with (docs/adr/NUMBER-title.md)."""
    return {
        path.name.split("-", 1)[0]: path
        for path in (DOCS / "adr").glob("*.md")
        if path.name[0].isdigit()
    }


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode("utf-8")
    suffixes = {".py", ".sql", ".md", ".yaml", ".yml", ".json", ".go", ".toml", ".html", ".txt"}
    return [
        ROOT / name
        for name in listed.split("\0")
        if name and Path(name).suffix in suffixes and not name.startswith("docs/adr/")
    ]


def _citations() -> list[tuple[str, str, str, str]]:
    """(where, number, anchor or '', text) of every decision-record citation in the repository."""
    found: list[tuple[str, str, str, str]] = []
    for path in _tracked_text_files():
        if not path.exists():
            continue
        for number, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1):
            for match in _CITATION.finditer(line):
                where = f"{path.relative_to(ROOT)}:{number}"
                anchors = [
                    f"s{m.group(1).replace('.', '-')}" if m.group(1) else f"d{m.group(2)}"
                    for m in _SECTION.finditer(match.group("sections"))
                ]
                if match.group("risk"):
                    anchors.append("open-risk")
                found.extend(
                    (where, match.group("number"), anchor, match.group(0))
                    for anchor in anchors or [""]
                )
    return found


def test_every_decision_record_the_code_cites_has_a_page_with_the_cited_section() -> None:
    citations = _citations()
    assert len(citations) > 100, "the scan found too few citations to be looking at the code"
    unresolved = []
    for where, number, anchor, text in citations:
        page = _records().get(number)
        if page is None:
            unresolved.append(f"{where}: {text} (no docs/adr/{number}-*.md)")
        elif anchor and anchor not in _ANCHOR.findall(page.read_text("utf-8")):
            unresolved.append(f"{where}: {text} (no section {{#{anchor}}} in {page.name})")
    assert unresolved == []


def test_a_citation_of_a_missing_section_is_caught() -> None:
    page = _records()["035"].read_text("utf-8")
    assert "s8" in _ANCHOR.findall(page)
    assert "s99" not in _ANCHOR.findall(page)
    assert [m.group("sections") for m in _CITATION.finditer("see ADR-035 §7, §8, §12.")] == [
        " §7, §8, §12"
    ]


# -- README and glossary ---------------------------------------------------------------------------


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = README.read_text("utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links
    assert [link for link in links if "://" not in link and not (ROOT / link).exists()] == []


GLOSSARY_WORDS: Final = ("dead letter", "dead_letter", "stale", "lease", "settle")
"""Words with two meanings here (or one a reader may not expect)."""


def test_pages_that_use_a_word_with_two_meanings_link_to_the_glossary() -> None:
    unlinked = []
    for path in sorted(DOCS.rglob("*.md")):
        relative = path.relative_to(DOCS).as_posix()
        if relative in pages() or relative in {"glossary.md", "changelog.md"}:
            continue
        text = path.read_text("utf-8").lower()
        used = any(re.search(rf"\b{word}", text) for word in GLOSSARY_WORDS)
        if used and "glossary.md" not in text:
            unlinked.append(relative)
    assert unlinked == []


_REPOSITORY_PATH: Final = re.compile(
    r"`((?:spectral|contracts|producers|consumers|schemas|tests|deploy|benchmarks|examples|docs)"
    r"/[^`\s]*)`"
)


def test_every_repository_path_the_docs_name_exists() -> None:
    """A file moved or renamed leaves no page pointing at where it was."""
    missing = []
    for path in sorted(DOCS.rglob("*.md")):
        for match in _REPOSITORY_PATH.finditer(path.read_text("utf-8")):
            named = match.group(1).split(":")[0].rstrip(".,")
            if any(c in named for c in "{*<") or (ROOT / named).exists():
                continue
            missing.append(f"{path.relative_to(DOCS)}: {named}")
    assert missing == []


def test_every_dependency_says_why_it_is_there() -> None:
    """Each package pyproject.toml asks for is named on the dependencies page."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    wanted = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        wanted += extra
    names = {re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower() for requirement in wanted}
    page = (DOCS / "reference" / "dependencies.md").read_text("utf-8").lower()
    assert len(names) > 20
    assert sorted(name for name in names if name not in page) == []


MODULE_DOCSTRING_MAX_LINES: Final = 40
"""A module docstring says what the module is and links to the explanation; a design essay
belongs on a docs page (docs/explanation/)."""


def test_no_module_docstring_is_a_design_essay() -> None:
    long = []
    for folder in ("spectral", "contracts", "producers", "consumers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            docstring = ast.get_docstring(ast.parse(path.read_text("utf-8")), clean=False)
            if docstring and len(docstring.splitlines()) > MODULE_DOCSTRING_MAX_LINES:
                long.append(f"{path.relative_to(ROOT)}: {len(docstring.splitlines())} lines")
    assert long == []
