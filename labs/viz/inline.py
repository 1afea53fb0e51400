"""Charts written as inline SVG text, for the pages that redraw a stored figure.

A lab's own charts are matplotlib SVGs drawn in the worker (``labs.viz.charts``); the
compare page redraws two runs' paired figures from the numbers stored with them, on
one x range and one value scale, as they read side by side. This module writes those:
no matplotlib and no torch, so the web process imports it. Presentation attributes
only (no ``style``, so the page's CSP allows them); text in ``currentColor``, bars in
the theme's first series colour with the ``bar`` class, which the page's stylesheet
recolours for dark mode; a ``<title>`` per bar with its exact value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

from labs.viz.svgplot import count_labels, nice_ticks, tick_text
from labs.viz.theme import PALETTE
from labs.viz.tiles import number_text

# Drawing area, in SVG user units (the image scales with the page).
# 400 wide with 12-unit text: the text reads at ~11 px on a 390 px phone, where the
# chart is ~360 px wide (at 640 it read at ~6 px), and ~14 px beside another on a desktop.
CHART_WIDTH = 400
CHART_HEIGHT = 200
CHART_MARGIN = (12, 12, 40, 44)  # top, right, bottom, left
CHART_TICKS = 5
BAR_ROW = 26  # height of one row of a horizontal bar chart
BAR_LABELS_WIDTH = 96  # room left of the bars for their labels
# The first series colour, as the lab charts draw their bars; ``.chart .bar`` in the
# page's stylesheet gives it the dark scheme's value.
BAR_FILL = f'fill="{PALETTE["blue"][0]}" class="bar" fill-opacity="0.75"'
# The second series (orange; ``.chart .bar-2`` gives the dark scheme's value).
SECOND_FILL = f'fill="{PALETTE["orange"][0]}" class="bar-2" fill-opacity="0.85"'


def _figure_data(leads: Sequence[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """What each stored figure event was drawn from (its ``data.data``)."""
    return [((e or {}).get("data") or {}).get("data") or {} for e in leads]


def shared_histograms(leads: Sequence[dict[str, Any] | None]) -> list[Markup] | None:
    """Two runs' paired histogram figures drawn on one x range and one count scale
    (each drawn alone, q6_k's errors filled the axis as q4_k's 16× larger ones did);
    None unless both figures are histograms."""
    data = _figure_data(leads)
    if len(data) != 2 or not all(d.get("kind") == "histogram" and d.get("edges") for d in data):
        return None
    lo = min(d["edges"][0] for d in data)
    hi = max(d["edges"][-1] for d in data)
    peak = max(max(d["counts"], default=0) for d in data) or 1
    return [
        histogram_svg(
            str((e or {}).get("data", {}).get("title", "")),
            d["edges"],
            d["counts"],
            d.get("x_label") or "",
            x_range=(lo, hi),
            peak=peak,
        )
        for e, d in zip(leads, data, strict=True)
    ]


def shared_bars(leads: Sequence[dict[str, Any] | None]) -> list[Markup] | None:
    """Two runs' paired bar figures (model-quality's SQNR by kind of weight, the KL of
    quant-algorithms' methods, of tensor-sensitivity's units, of kv-quant's positions)
    redrawn on one value axis: drawn alone on the worker, q4_0's 21 dB and q8_0's 45 dB
    bars both filled their plots. The second run's bars follow the first's order (a
    ranking may differ). None unless both are bar figures with the same labels."""
    data = _figure_data(leads)
    if len(data) != 2 or not all(d.get("kind") == "bars" and d.get("labels") for d in data):
        return None
    first, second = data
    if sorted(first["labels"]) != sorted(second["labels"]):
        return None
    data = [first, _reordered(second, list(first["labels"]))]
    hi = max(max([*d["values"], *(d.get("high") or [])], default=0.0) for d in data) or 1.0
    return [bars_svg(d, hi) for d in data]


def _reordered(d: dict[str, Any], labels: list[str]) -> dict[str, Any]:
    """Bar figure data ``d`` with its bars in the order of ``labels``."""
    at = {label: i for i, label in enumerate(d["labels"])}
    pick = [at[label] for label in labels]
    series = {
        key: [d[key][i] for i in pick]
        for key in ("values", "low", "high")
        if len(d.get(key) or []) == len(pick)
    }
    return {**d, "labels": labels, **series}


def shared_axes(pair: Sequence[dict[str, Any] | None]) -> list[Markup] | None:
    """A pair of the same figure of two runs redrawn on one axis from the numbers
    stored with it (stacked bars, bars or histograms); None where it cannot be."""
    if len(pair) != 2 or not all(pair):
        return None
    return shared_stacked(pair) or shared_bars(pair) or shared_histograms(pair)


def shared_stacked(leads: Sequence[dict[str, Any] | None]) -> list[Markup] | None:
    """Two runs' rounding vs clipping bars (block-quantize's, granularity-compare's)
    redrawn on one MSE axis: drawn alone, q6_k's 16× smaller error filled its plot as
    q4_k's did. None unless both are stacked bar figures."""
    data = _figure_data(leads)
    if len(data) != 2 or not all(d.get("kind") == "stacked" and d.get("parts") for d in data):
        return None
    hi = max(
        max(map(sum, zip(*(p[1] for p in d["parts"]), strict=True)), default=0.0) for d in data
    )
    return [stacked_svg(d, hi or 1.0) for d in data]


def stacked_svg(d: dict[str, Any], hi: float) -> Markup:
    """Horizontal bars of stacked parts (``parts``: [name, values per label]) from zero
    to ``hi``, in the style of ``bars_svg``; the second part in the second series colour
    (``bar-2``), each part's exact value in its ``<title>``."""
    labels, parts = list(d["labels"]), [(str(p[0]), [float(v) for v in p[1]]) for p in d["parts"]]
    top, right, bottom, left = CHART_MARGIN[0], CHART_MARGIN[1], CHART_MARGIN[2], BAR_LABELS_WIDTH
    w, h = CHART_WIDTH - left - right, BAR_ROW * len(labels)
    parts_svg = _chart_open(str(d.get("title") or ""), h + top + bottom, (left, top), (w, h))
    for i, label in enumerate(labels):
        y, x = i * BAR_ROW + 3, 0.0
        for k, (name, values) in enumerate(parts):
            width = max(values[i], 0.0) / hi * w
            fill = BAR_FILL if k == 0 else SECOND_FILL
            parts_svg.append(
                f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{BAR_ROW - 6}" {fill}>'
                f"<title>{escape(str(label))}, {escape(name)}: {escape(number_text(values[i]))}</title></rect>"
            )
            x += width
        parts_svg.append(_row_label(label, y))
    parts_svg += _value_ticks(hi, (w, h))
    # The axis says which colour is which in a few words ("MSE: rounding (blue) +
    # clipping (orange)"); each bar's <title> has the part's whole name and value.
    key = " + ".join(
        f"{name.split(' (')[0]} ({colour})"
        for (name, _), colour in zip(parts, ("blue", "orange"), strict=False)
    )
    return _chart_close(parts_svg, (w, h), f"{d.get('x_label') or ''}: {key}")


def bars_svg(d: dict[str, Any], hi: float) -> Markup:
    """Horizontal bars from zero to ``hi`` with optional low-high whiskers, as inline
    SVG in the style of ``histogram_svg``."""
    labels, values = list(d["labels"]), [float(v) for v in d["values"]]
    low, high = d.get("low") or [], d.get("high") or []
    top, right, bottom, left = CHART_MARGIN[0], CHART_MARGIN[1], CHART_MARGIN[2], BAR_LABELS_WIDTH
    row = BAR_ROW
    w, h = CHART_WIDTH - left - right, row * len(labels)
    height = h + top + bottom
    title = str(d.get("title") or "")
    parts = _chart_open(title, height, (left, top), (w, h))
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        y = i * row + 3
        span = (
            f", {number_text(float(low[i]))} to {number_text(float(high[i]))}"
            if i < len(high)
            else ""
        )
        parts.append(
            f'<rect x="0" y="{y}" width="{max(v, 0) / hi * w:.2f}" height="{row - 6}" {BAR_FILL}>'
            f"<title>{escape(str(label))}: {escape(number_text(v))}{escape(span)}</title></rect>"
        )
        if i < len(high) and i < len(low):
            x0, x1, ym = float(low[i]) / hi * w, float(high[i]) / hi * w, y + (row - 6) / 2
            parts.append(
                f'<line x1="{x0:.2f}" y1="{ym:.1f}" x2="{x1:.2f}" y2="{ym:.1f}" stroke="currentColor"/>'
            )
        parts.append(_row_label(label, y))
    parts += _value_ticks(hi, (w, h))
    return _chart_close(parts, (w, h), str(d.get("x_label") or ""))


def _row_label(label: object, y: float) -> str:
    """A horizontal bar's label, left of the bar that starts at ``y``."""
    return f'<text x="-6" y="{y + BAR_ROW / 2:.1f}" text-anchor="end">{escape(str(label))}</text>'


def _value_ticks(hi: float, size: tuple[float, float]) -> list[str]:
    """Round ticks of a bar chart's value axis, from zero to ``hi``, under the plot."""
    (w, h), ticks = size, nice_ticks(0.0, hi, CHART_TICKS + 1)
    return [
        f'<text x="{t / hi * w:.1f}" y="{h + 16}" text-anchor="middle">{escape(tick_text(t, ticks))}</text>'
        for t in ticks
    ]


def histogram_svg(
    title: str,
    edges: list[float],
    counts: list[int],
    x_label: str = "",
    x_range: tuple[float, float] | None = None,
    peak: int | None = None,
) -> Markup:
    """A bar chart of binned data as inline SVG, a ``<title>`` per bar for its exact
    range and count. ``x_range`` and ``peak`` fix the axes, so two histograms drawn side
    by side read on the same scale."""
    top, right, bottom, left = CHART_MARGIN
    w, h = CHART_WIDTH - left - right, CHART_HEIGHT - top - bottom
    n = len(counts)
    peak = peak or max(counts, default=0) or 1
    lo, hi = (edges[0], edges[-1]) if len(edges) == n + 1 and n else (0.0, 1.0)
    if x_range is not None:
        lo, hi = x_range
    span = (hi - lo) or 1.0
    parts = _chart_open(title, CHART_HEIGHT, (left, top), (w, h))
    for i, c in enumerate(counts):
        x0 = (edges[i] - lo) / span * w
        bw = max((edges[i + 1] - edges[i]) / span * w - 1, 0.5)
        bh = c / peak * h
        parts.append(
            f'<rect x="{x0:.2f}" y="{h - bh:.2f}" width="{bw:.2f}" height="{bh:.2f}" {BAR_FILL}>'
            f"<title>{escape(number_text(edges[i]))} to {escape(number_text(edges[i + 1]))}: {c}</title></rect>"
        )
    # Round ticks (1, 2, 2.5 or 5 × 10ⁿ apart) inside the range, as the lab charts have.
    x_ticks = nice_ticks(lo, hi, CHART_TICKS + 1)
    for v in x_ticks:
        parts.append(
            f'<text x="{(v - lo) / span * w:.1f}" y="{h + 16}" text-anchor="middle">{escape(tick_text(v, x_ticks))}</text>'
        )
    y_ticks = nice_ticks(0.0, float(peak), CHART_TICKS)
    for tick, label in zip(y_ticks, count_labels(y_ticks), strict=True):
        parts.append(
            f'<text x="-6" y="{h - tick / peak * h + 4:.1f}" text-anchor="end">{escape(label)}</text>'
        )
    return _chart_close(parts, (w, h), x_label)


def _chart_open(
    title: str, height: int, at: tuple[int, int], size: tuple[float, float]
) -> list[str]:
    """An inline SVG chart's start: the titled root, the plot area at ``at`` and its two
    axis lines (``size`` is the plot area's width and height)."""
    (left, top), (w, h) = at, size
    return [
        f'<svg class="chart" viewBox="0 0 {CHART_WIDTH} {height}" role="img" aria-label="{escape(title)}" '
        'xmlns="http://www.w3.org/2000/svg" font-size="12" fill="currentColor">',
        f"<title>{escape(title)}</title>",
        f'<g transform="translate({left},{top})">',
        f'<line x1="0" y1="{h}" x2="{w}" y2="{h}" stroke="currentColor" stroke-opacity="0.6"/>',
        f'<line x1="0" y1="0" x2="0" y2="{h}" stroke="currentColor" stroke-opacity="0.6"/>',
    ]


def _chart_close(parts: list[str], size: tuple[float, float], x_label: str) -> Markup:
    """The x-axis label and the end of a chart begun by ``_chart_open``."""
    w, h = size
    parts.append(
        f'<text x="{w / 2:.1f}" y="{h + 36}" text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append("</g></svg>")
    # Every interpolated text went through escape(); the rest is numbers we formatted.
    return Markup("".join(parts))  # noqa: S704
