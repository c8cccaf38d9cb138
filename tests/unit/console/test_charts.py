"""Charts drawn on the server: well-formed SVG with no script, escaped text, any data."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from spectral.console.charts import Point, sparkline, time_chart

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HOSTILE = '<script>alert(1)</script>" onload="x'
SVG = "{http://www.w3.org/2000/svg}"


def parsed(markup: str) -> ET.Element:
    # The console inlines SVG in HTML, where the namespace is implied; parse it as XML with one.
    return ET.fromstring(markup.replace("<svg ", f'<svg xmlns="{SVG[1:-1]}" ', 1))  # noqa: S314 - our own output


def test_a_time_chart_has_its_axes_points_and_summary() -> None:
    points = [Point(T0 + timedelta(hours=h), v) for h, v in enumerate([3, 9, 4, 12])]
    svg = parsed(str(time_chart(points, title="Failures", y_label="failures")))
    assert svg.get("role") == "img"
    assert svg.findtext(f"{SVG}title") == "Failures"
    assert "4 samples of failures" in (svg.findtext(f"{SVG}desc") or "")
    assert len(svg.findall(f"{SVG}circle")) == 4
    assert svg.find(f"{SVG}polyline") is not None


def test_a_limit_is_drawn_and_empty_data_says_so() -> None:
    points = [Point(T0, 10), Point(T0 + timedelta(days=1), 80)]
    with_limit = str(
        time_chart(points, title="Spend", y_label="tokens", limit=100, limit_label="budget")
    )
    assert 'class="chart-limit"' in with_limit
    assert "budget" in with_limit
    empty = str(time_chart([], title="Spend", y_label="tokens"))
    assert "no data yet" in empty
    parsed(empty)


def test_text_in_a_chart_is_escaped() -> None:
    chart = str(time_chart([Point(T0, 1)], title=HOSTILE, y_label=HOSTILE))
    spark = str(sparkline([1, 2], label=HOSTILE))
    for markup in (chart, spark):
        assert "<script" not in markup
        parsed(markup)


@given(
    st.lists(
        st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False),
        max_size=60,
    )
)
def test_any_series_draws_well_formed_svg_inside_its_box(values: list[float]) -> None:
    spark = parsed(str(sparkline(values, label="trend")))
    for circle in spark.findall(f"{SVG}circle"):
        assert 0 <= float(circle.get("cy", "nan")) <= 22
    points = [Point(T0 + timedelta(hours=i), v) for i, v in enumerate(values)]
    chart = parsed(str(time_chart(points, title="t", y_label="y")))
    for circle in chart.findall(f"{SVG}circle"):
        x, y = float(circle.get("cx", "nan")), float(circle.get("cy", "nan"))
        assert math.isfinite(x)
        assert math.isfinite(y)
        assert 0 <= x <= 640
        assert 0 <= y <= 220
