"""Figures, targets and checks of one run: a table on the terminal, JSON lines, result files."""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

RESULTS_DIR = Path(__file__).with_name("results")


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    note: str = ""

    def json_line(self) -> str:
        return json.dumps({"name": self.name, "value": round(self.value, 3), "unit": self.unit})


@dataclass(frozen=True)
class Target:
    name: str
    measured: float
    goal: str
    met: bool


@dataclass(frozen=True)
class Check:
    """A correctness check of the run itself (a fast wrong answer is no answer)."""

    name: str
    ok: bool
    detail: str


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()
    return {
        "cores": str(os.cpu_count() or 0),
        "cpu": cpu,
        "load_1_5_15": " ".join(f"{v:.2f}" for v in load),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


@dataclass
class Report:
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    machine_start: dict[str, str] = field(default_factory=machine)
    machine_end: dict[str, str] = field(default_factory=dict)
    context: dict[str, str] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, value: float, unit: str, note: str = "") -> Figure:
        figure = Figure(name, value, unit, note)
        self.figures.append(figure)
        print(figure.json_line(), flush=True)
        return figure

    def load(self, label: str) -> Figure:
        """The machine's 1-minute load average now, as a figure (``loadavg_LABEL``): every
        run's output says what else the machine was doing while each stage ran."""
        one, five, fifteen = os.getloadavg()
        return self.add(
            f"loadavg_{label}", one, "load", f"1/5/15 min: {one:.2f} {five:.2f} {fifteen:.2f}"
        )

    def target(self, name: str, measured: float, goal: str, met: bool) -> None:
        self.targets.append(Target(name, measured, goal, met))

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Check(name, ok, detail))
        mark = "ok" if ok else "FAILED"
        print(f"check {mark}: {name} — {detail}", flush=True)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    # -- output ---------------------------------------------------------------------------------

    def render(self, console: Console) -> None:
        table = Table(title="spectral benchmarks", show_lines=False)
        table.add_column("figure")
        table.add_column("value", justify="right")
        table.add_column("unit")
        table.add_column("note")
        for f in self.figures:
            table.add_row(f.name, fmt(f.value), f.unit, f.note)
        console.print(table)
        if self.targets:
            targets = Table(title="targets (ratios within this run)")
            targets.add_column("target")
            targets.add_column("measured", justify="right")
            targets.add_column("goal")
            targets.add_column("met")
            for t in self.targets:
                targets.add_row(t.name, fmt(t.measured), t.goal, "yes" if t.met else "NO")
            console.print(targets)
        console.print(self.machine_line())
        for note in self.notes:
            console.print(f"note: {note}")

    def machine_line(self) -> str:
        start, end = self.machine_start, self.machine_end or self.machine_start
        return (
            f"machine: {start['cores']} cores ({start['cpu']}), load {start['load_1_5_15']} at "
            f"start, {end['load_1_5_15']} at end; Python {start['python']}, "
            + ", ".join(f"{k} {v}" for k, v in self.context.items())
        )

    def markdown(self) -> str:
        lines = [
            f"# spectral benchmark run {self.started:%Y-%m-%d %H:%M:%SZ}",
            "",
            self.machine_line(),
            "",
            "| figure | value | unit | note |",
            "| --- | ---: | --- | --- |",
        ]
        lines += [f"| {f.name} | {fmt(f.value)} | {f.unit} | {f.note} |" for f in self.figures]
        if self.targets:
            lines += ["", "| target | measured | goal | met |", "| --- | ---: | --- | --- |"]
            lines += [
                f"| {t.name} | {fmt(t.measured)} | {t.goal} | {'yes' if t.met else 'NO'} |"
                for t in self.targets
            ]
        if self.checks:
            lines += ["", "Checks:", ""]
            lines += [f"- {'ok' if c.ok else 'FAILED'}: {c.name} — {c.detail}" for c in self.checks]
        if self.notes:
            lines += ["", "Notes:", ""]
            lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def record(self) -> dict[str, Any]:
        """The whole run as one JSON document: what `make bench-publish` gives the performance
        page (docs/explanation/performance-run.json), whose figures are generated from it."""
        return {
            "started": f"{self.started:%Y-%m-%dT%H:%M:%SZ}",
            "machine_start": self.machine_start,
            "machine_end": self.machine_end or self.machine_start,
            "context": self.context,
            "figures": [asdict(f) for f in self.figures],
            "targets": [asdict(t) for t in self.targets],
            "checks": [asdict(c) for c in self.checks],
            "notes": self.notes,
        }

    def write(self, directory: Path = RESULTS_DIR) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        stem = f"bench-{self.started:%Y%m%dT%H%M%SZ}"
        outputs = {
            "jsonl": "".join(f.json_line() + "\n" for f in self.figures),
            "md": self.markdown(),
            "json": json.dumps(self.record(), indent=1, ensure_ascii=False) + "\n",
        }
        for suffix, text in outputs.items():
            (directory / f"{stem}.{suffix}").write_text(text, encoding="utf-8")
            (directory / f"latest.{suffix}").write_text(text, encoding="utf-8")
        return directory / f"{stem}.jsonl"


def fmt(value: float) -> str:
    """A figure as every table of a run prints it: thousands separated from 100 up, else two
    decimals."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"
