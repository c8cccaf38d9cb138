"""Charts drawn on the server as SVG: the console needs no script (its strict Content Security
Policy stays), the picture is part of the page (it prints, it is in the screenshot), and a
screen reader gets its summary (``role="img"`` with a title and a description).

Two shapes: :func:`sparkline`, a word-sized line for a table cell, and :func:`time_chart`, a
time series with labelled axes. Colours and strokes come from the console's stylesheet
(``svg.chart`` classes), so a chart follows the page's theme.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from markupsafe import Markup, escape

_TICKS: Final = 4


@dataclass(frozen=True, slots=True)
class Point:
    at: datetime
    value: float


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"


def _nice_step(span: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that divides ``span`` into at most
    ``_TICKS`` steps (so the axis reads 0, 10, 20, 30, not 0, 8.25, 16.5)."""
    raw = span / _TICKS
    if raw <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _scale(value: float, low: float, high: float, size: float) -> float:
    return 0.0 if high == low else (value - low) / (high - low) * size


def sparkline(values: Sequence[float], *, label: str, width: int = 96, height: int = 22) -> Markup:
    """A line of ``values`` (oldest first) in a box of ``width`` x ``height`` pixels; ``label``
    says what it shows. Fewer than two values draw a dot (or nothing)."""
    title = escape(label)
    if not values:
        return Markup(  # noqa: S704 - every interpolated text is escaped
            f'<svg class="spark" width="{width}" height="{height}" role="img" '
            f'aria-label="{title}"><title>{title}</title></svg>'
        )
    low, high = min(0.0, *values), max(values)
    step = width / max(len(values) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - 2 - _scale(v, low, high, height - 4):.1f}"
        for i, v in enumerate(values)
    )
    last_x = (len(values) - 1) * step
    last_y = height - 2 - _scale(values[-1], low, high, height - 4)
    return Markup(  # noqa: S704 - numbers and escaped text only
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{title}"><title>{title}</title>'
        f'<polyline class="spark-line" points="{points}"/>'
        f'<circle class="spark-end" cx="{last_x:.1f}" cy="{last_y:.1f}" r="2"/></svg>'
    )


def time_chart(
    points: Sequence[Point],
    *,
    title: str,
    y_label: str,
    limit: float | None = None,
    limit_label: str = "",
    width: int = 640,
    height: int = 220,
) -> Markup:
    """A time series with its axes: ``points`` in time order as a line with dots, the y axis
    from 0 (or the lowest value) to the highest (or ``limit``, drawn as a dashed line with
    ``limit_label``), the first and last times under the x axis."""
    left, right, top, bottom = 56, 12, 14, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    caption = escape(title)
    if not points:
        return Markup(  # noqa: S704 - escaped text only
            f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{caption}: no data yet"><title>{caption}</title>'
            f'<text class="chart-empty" x="{width / 2}" y="{height / 2}" text-anchor="middle">'
            "no data yet</text></svg>"
        )
    values = [p.value for p in points]
    low = min(0.0, *values)
    step = _nice_step((max([*values, limit or 0.0]) - low) or 1.0)
    high = low + step * math.ceil((max([*values, limit or 0.0]) - low) / step or 1.0)
    start, end = points[0].at, points[-1].at
    span = (end - start).total_seconds()

    def x(at: datetime) -> float:
        if span == 0:  # one moment: in the middle
            return left + plot_w / 2
        return left + ((at - start).total_seconds() / span) * plot_w

    def y(value: float) -> float:
        return top + plot_h - _scale(value, low, high, plot_h)

    head = (
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{caption}"><title>{caption}</title>'
        f"<desc>{escape(_describe(points, y_label))}</desc>"
    )
    parts = [head]
    for i in range(round((high - low) / step) + 1):
        value = low + step * i
        parts.append(
            f'<line class="chart-grid" x1="{left}" x2="{left + plot_w}" '
            f'y1="{y(value):.1f}" y2="{y(value):.1f}"/>'
            f'<text class="chart-tick" x="{left - 6}" y="{y(value) + 4:.1f}" '
            f'text-anchor="end">{escape(_number(value))}</text>'
        )
    if limit is not None:
        parts.append(
            f'<line class="chart-limit" x1="{left}" x2="{left + plot_w}" '
            f'y1="{y(limit):.1f}" y2="{y(limit):.1f}"/>'
            f'<text class="chart-limit-label" x="{left + plot_w}" y="{y(limit) - 4:.1f}" '
            f'text-anchor="end">{escape(limit_label)}</text>'
        )
    line = " ".join(f"{x(p.at):.1f},{y(p.value):.1f}" for p in points)
    parts.append(f'<polyline class="chart-line" points="{line}"/>')
    parts.extend(
        f'<circle class="chart-dot" cx="{x(p.at):.1f}" cy="{y(p.value):.1f}" r="2.5">'
        f"<title>{escape(p.at.strftime('%Y-%m-%d %H:%M UTC'))}: {escape(_number(p.value))}"
        "</title></circle>"
        for p in points
    )
    axis_y = top + plot_h
    parts.append(
        f'<line class="chart-axis" x1="{left}" x2="{left + plot_w}" y1="{axis_y}" '
        f'y2="{axis_y}"/>'
        f'<text class="chart-tick" x="{left}" y="{height - 8}">'
        f"{escape(start.strftime('%m-%d %H:%M'))}</text>"
        f'<text class="chart-tick" x="{left + plot_w}" y="{height - 8}" text-anchor="end">'
        f"{escape(end.strftime('%m-%d %H:%M'))} UTC</text>"
        f'<text class="chart-tick" x="12" y="{top + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + plot_h / 2})">{escape(y_label)}</text></svg>'
    )
    return Markup("".join(parts))  # noqa: S704 - numbers and escaped text only


def _describe(points: Sequence[Point], y_label: str) -> str:
    first, last = points[0], points[-1]
    return (
        f"{len(points)} samples of {y_label} from {first.at:%Y-%m-%d %H:%M} to "
        f"{last.at:%Y-%m-%d %H:%M} UTC; first {_number(first.value)}, last "
        f"{_number(last.value)}, highest {_number(max(p.value for p in points))}."
    )
