"""labs.viz.svgplot and the charts written with it: round ticks, readable labels, and
marks where the numbers put them (the block-quantize figures no longer use matplotlib)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from app.settings import ROOT
from labs.viz import charts, svgplot
from tests.unit.labs.viz.test_charts import SVG_NS, _assert_safe, _texts


@pytest.mark.parametrize(
    ("lo", "hi", "count", "ticks"),
    [
        (-4.1, 4.1, 5, [-4, -2, 0, 2, 4]),
        (0.0, 1.65, 4, [0, 0.5, 1, 1.5]),
        (0.0, 6615.0, 5, [0, 2000, 4000, 6000]),
        (-0.457, 0.52, 5, [-0.4, -0.2, 0, 0.2, 0.4]),
        (0.0, 0.0145, 4, [0, 0.005, 0.01]),
    ],
)
def test_ticks_are_round_and_as_many_as_fit(lo, hi, count, ticks) -> None:
    assert svgplot.nice_ticks(lo, hi, count) == pytest.approx(ticks)


def test_tick_labels_carry_the_decimals_their_spacing_needs() -> None:
    assert [svgplot.tick_text(t, [0, 0.5, 1.0]) for t in (0, 0.5, 1.0)] == ["0", "0.5", "1.0"]
    assert svgplot.tick_text(-2.5, [-5, -2.5, 0]) == "−2.5"
    assert svgplot.tick_text(2e-4, [0, 2e-4]) == "2×10⁻⁴"
    assert [svgplot.count_text(v) for v in (1, 100, 1000, 10_000, 2e6)] == [
        "1", "100", "1k", "10k", "2M"
    ]  # fmt: skip


def test_a_count_axis_never_mixes_750_with_1k() -> None:
    assert svgplot.count_labels([0, 250, 500, 750, 1000]) == ["0", "250", "500", "750", "1,000"]
    assert svgplot.count_labels([0, 2000, 4000, 6000]) == ["0", "2k", "4k", "6k"]


def _path_ds(svg: str) -> list[str]:
    return [p.get("d", "") for p in ET.fromstring(svg).iter(f"{SVG_NS}path")]


def test_a_histograms_bars_stand_as_tall_as_their_counts() -> None:
    svg = charts.binned_histogram([0, 1, 2, 3], [10, 40, 20], title="h", x_label="value")
    _assert_safe(svg)
    bars = next(d for d in _path_ds(svg) if d.count("H") == 3)  # the one stepped path
    tops = [float(v) for v in re.findall(r"V([\d.]+)", bars)[:3]]
    start = float(re.match(r"M[\d.]+ ([\d.]+)", bars).group(1))
    heights = [start - t for t in tops]
    assert heights[1] / heights[0] == pytest.approx(4, rel=1e-3)
    assert heights[2] / heights[0] == pytest.approx(2, rel=1e-3)
    assert "values" in _texts(svg) and "value" in _texts(svg)


def test_a_log_histogram_keeps_a_single_value_visible() -> None:
    svg = charts.binned_histogram([0, 1, 2, 3], [1, 100_000, 3], title="h", x_label="error")
    bars = next(d for d in _path_ds(svg) if d.count("H") == 3)
    start = float(re.match(r"M[\d.]+ ([\d.]+)", bars).group(1))
    first = float(re.findall(r"V([\d.]+)", bars)[0])
    assert start - first > 1  # a bin of one value is a visible bar, not the baseline
    assert "values (log scale)" in _texts(svg) and "100k" in _texts(svg)


def test_the_value_grid_joins_each_value_to_where_it_is_stored() -> None:
    svg = charts.value_grid([-1.0, 0.0, 1.0], [0.2, -0.9], [0.0, -1.0], title="grid")
    _assert_safe(svg)
    plot = svgplot.Plot.inches((charts.FIGURE_SIZE_IN[0], charts.GRID_HEIGHT_IN), (0, 0, 0, 0))
    links = [d for d in _path_ds(svg) if d.count("M") == 2 and "L" in d]
    assert len(links) == 1  # one path for both links
    (x0, y0, x1, y1), (x2, y2, x3, y3) = (
        tuple(float(v) for v in m)
        for m in re.findall(r"M([\d.]+) ([\d.]+)L([\d.]+) ([\d.]+)", links[0])
    )
    assert y0 < y1 and y2 < y3  # from the top row (the value) down to the stored row
    assert x0 > x2 and x1 > x3  # 0.2 → 0 lies right of −0.9 → −1
    assert plot.width == 360


def test_a_block_quantize_run_draws_its_figures_without_matplotlib() -> None:
    """matplotlib's text layout cost ~250 ms of a ~330 ms run: the four figures of every
    run are written directly. A run with matplotlib unimportable still draws them all."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["matplotlib"] = None  # any import of it fails
        from tests.unit.labs.helpers import run_lab
        _, events = run_lab("block-quantize", {"format": "nvfp4", "shape": [64, 64]})
        print(sorted(d["id"] for kind, d in events if kind == "plot"))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "['error-split', 'errors', 'grid', 'values']"
