"""The performance page is generated from one published run: a run that left a stage out, ran on
uncommitted code or failed a check is refused, a figure the page names and the run lacks stops
the generator, and whatever a figure's note holds, each figure stays one row of its table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.options import DEFAULT_STAGES
from benchmarks.report import Report
from docs.gen import performance


def _run(**changes: Any) -> dict[str, Any]:
    run: dict[str, Any] = json.loads(performance.RUN.read_text("utf-8"))
    run.update(changes)
    return run


def test_the_published_run_is_a_whole_run_of_committed_code_that_passed_every_check() -> None:
    assert performance.publishable(_run()) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"context": {"commit": "abc1234", "stages": "triage,freshness"}}, "not a whole run"),
        (
            {"context": {"commit": "abc1234-dirty", "stages": ",".join(DEFAULT_STAGES)}},
            "not a run of committed code (commit abc1234-dirty)",
        ),
        ({"context": {"stages": ",".join(DEFAULT_STAGES)}}, "(commit unknown)"),
        (
            {
                "context": {"commit": "abc1234", "stages": ",".join(DEFAULT_STAGES)},
                "checks": [{"name": "first pass: applied once", "ok": False, "detail": "2 twice"}],
            },
            "1 check(s) failed: first pass: applied once",
        ),
    ],
)
def test_a_run_that_may_not_be_cited_is_refused_and_the_published_one_stays(
    tmp_path: Path, change: dict[str, Any], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = tmp_path / "latest.json"
    candidate.write_text(json.dumps(_run(**change)), "utf-8")
    published = performance.RUN.read_bytes()
    assert performance.publish(candidate) == 1
    assert problem in capsys.readouterr().err
    assert performance.RUN.read_bytes() == published


def test_a_figure_the_page_names_and_the_run_lacks_stops_the_generator() -> None:
    run = _run()
    run["figures"] = [f for f in run["figures"] if f["name"] != "freshness_10k_p99"]
    with pytest.raises(performance.RunError, match=r"\{\{ freshness_10k_p99 \}\}"):
        performance.fill(performance.TEMPLATE.read_text("utf-8"), run)


def test_a_placeholder_the_generator_cannot_read_stops_it() -> None:
    with pytest.raises(performance.RunError, match="Consumer_CPU"):
        performance.fill("a line\nthe consumer: {{ Consumer_CPU }} us\n", _run())


def test_a_record_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    for text in ("", "[]", "5", "null", '"started"', '{"figures": []}', "{not json"):
        candidate = tmp_path / "latest.json"
        candidate.write_text(text, "utf-8")
        assert performance.publish(candidate) == 1


def test_what_a_run_writes_is_what_the_page_reads(tmp_path: Path) -> None:
    report = Report()
    report.context.update(commit="abc1234", stages=",".join(DEFAULT_STAGES))
    report.add("consumer_cpu_per_event", 12.345, "us", "the consumer's process | over a pass")
    report.target("consumer CPU per event (us)", 12.345, "<= 15", met=True)
    report.check("first pass: applied once", ok=True, detail="190,215 of 190,215")
    report.notes.append("whole run: 500 s")
    report.write(tmp_path)
    run = json.loads((tmp_path / "latest.json").read_text("utf-8"))
    assert performance.publishable(run) == []
    page = performance.fill(
        "c = {{ consumer_cpu_per_event }} in {{ run.duration }}; {{ run.checks }}\n"
        "{{ table.targets }}\n{{ table.figures }}\n",
        run,
    )
    assert page.startswith("c = 12.35 in 500 s; 1 of 1\n")
    assert "| consumer CPU per event (us) | 12.35 | <= 15 | yes |" in page
    assert "the consumer's process \\| over a pass" in page


@given(
    st.lists(
        st.tuples(st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True), st.text(), st.text()),
        min_size=1,
        max_size=8,
        unique_by=lambda figure: figure[0],
    )
)
def test_whatever_a_figure_s_note_or_unit_holds_it_stays_one_row(
    figures: list[tuple[str, str, str]],
) -> None:
    run = _run(
        figures=[
            {"name": name, "value": 1.5, "unit": unit, "note": note} for name, unit, note in figures
        ]
    )
    table = performance.fill("{{ table.figures }}", run).split("\n")
    assert len(table) == 2 + len(figures)
    for row, (name, _, _) in zip(table[2:], figures, strict=True):
        assert row.startswith(f"| `{name}` | 1.50 | ")
        assert row.count("|") - row.count("\\|") == 5


def test_a_whole_number_reads_without_decimals_and_a_fraction_as_the_run_prints_it() -> None:
    run = _run(
        figures=[
            {"name": "stale_rows", "value": 84.0, "unit": "rows", "note": ""},
            {"name": "rate", "value": 33541.706, "unit": "events/s", "note": ""},
            {"name": "ratio", "value": 1.084, "unit": "x", "note": ""},
        ]
    )
    assert performance.fill("{{ stale_rows }} {{ rate }} {{ ratio }}", run) == "84 33,542 1.08"
