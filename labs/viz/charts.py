"""The lab charts: small, self-contained SVG figures of a run's results.

Drawn with matplotlib's object API (no pyplot global state) on the SVG backend,
imported lazily so importing a lab never imports matplotlib; colours, rcParams and
the sanitiser are ``labs.viz.theme``'s. Text stays text (``svg.fonttype = none``),
ids are deterministic and namespaced per chart, and the output is sanitised for
inlining: no XML prolog or DOCTYPE (an external DTD reference), no ``<script>``, no
event-handler attributes, no external links. The generic kinds (bars, histogram,
lines) come first, then the teaching figures the labs share; each is drawn in the
worker, and the run page shows it as an image with a data table beside it.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from labs.viz import svgplot
from labs.viz.theme import (
    C1,
    C2,
    C3,
    C4,
    CHART_RC,
    FG,
    MUTED,
    SERIES,
    sanitize_svg,
    theme_colours,
)
from labs.viz.tiles import readable

if TYPE_CHECKING:
    from labs.base import Context

# Small figures: they sit beside text in a lab result. Inches (72 SVG units each):
# narrow enough that 10-unit text still reads at ~10 px on a 390 px phone.
FIGURE_SIZE_IN = (5.0, 3.2)
# Hard ceiling on one chart; the run's output cap must never be spent on plots.
MAX_SVG_BYTES = 60_000
# Labels longer than this are shortened; matplotlib would squeeze the axes.
MAX_LABEL_CHARS = 28
DEFAULT_BINS = 40
MAX_BINS = 200
# id="x", href="#x" and url(#x): rewritten with a per-chart prefix so several
# charts inlined in one page never resolve each other's markers or clip paths.
_ID_REF = re.compile(r'(\bid=")([^"]+)"|(href="#)([^"]+)"|(url\(#)([^)]+)\)')


def _namespace_ids(svg: str) -> str:
    prefix = "lb" + hashlib.sha1(svg.encode(), usedforsecurity=False).hexdigest()[:8] + "-"

    def rewrite(m: re.Match[str]) -> str:
        if m.group(1):
            return f'{m.group(1)}{prefix}{m.group(2)}"'
        if m.group(3):
            return f'{m.group(3)}{prefix}{m.group(4)}"'
        return f"{m.group(5)}{prefix}{m.group(6)})"

    return _ID_REF.sub(rewrite, svg)


def short_label(label: object) -> str:
    text = str(label)
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def render(draw: Any, size_in: tuple[float, float] = FIGURE_SIZE_IN) -> str:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from cycler import cycler
    from matplotlib.figure import Figure

    rc = {**CHART_RC, "axes.prop_cycle": cycler(color=list(SERIES))}
    with matplotlib.rc_context(cast(Any, rc)):
        fig = Figure(figsize=size_in, layout="constrained")
        ax = fig.subplots()
        draw(ax)
        buf = io.StringIO()
        # Transparent: the chart sits on the page's own background, light or dark.
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, transparent=True)
    svg = theme_colours(_namespace_ids(sanitize_svg(buf.getvalue())))
    if len(svg.encode()) > MAX_SVG_BYTES:
        raise ValueError(f"chart is {len(svg.encode())} bytes, over the {MAX_SVG_BYTES}-byte limit")
    return svg


def bar_chart(
    labels: Sequence[object],
    values: Sequence[float],
    *,
    title: str,
    value_label: str,
    horizontal: bool = True,
) -> str:
    """Bars of ``values`` (axis label ``value_label``, with its unit) named by ``labels``."""
    if len(labels) != len(values):
        raise ValueError("labels and values differ in length")
    names = [short_label(x) for x in labels]

    def draw(ax: Any) -> None:
        if horizontal:
            ax.barh(names, values, color=C1)
            ax.invert_yaxis()
            ax.set_xlabel(value_label)
        else:
            ax.bar(names, values, color=C1)
            ax.set_ylabel(value_label)
            ax.tick_params(axis="x", labelrotation=30)
        ax.set_title(title)

    return render(draw)


def histogram(
    values: Sequence[float],
    *,
    title: str,
    value_label: str,
    bins: int = DEFAULT_BINS,
    count_label: str = "count",
) -> str:
    """Histogram of ``values``; the sample is binned here, so the SVG size does not grow with it."""
    bins = max(1, min(int(bins), MAX_BINS))

    def draw(ax: Any) -> None:
        ax.hist(list(values), bins=bins, color=C1)
        ax.set_xlabel(value_label)
        ax.set_ylabel(count_label)
        ax.set_title(title)

    return render(draw)


def line_chart(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    hlines: Mapping[str, float] | None = None,
    log_x: bool = False,
) -> str:
    """One line per ``series`` entry (name → (xs, ys)); ``hlines`` draws labelled limits."""

    def draw(ax: Any) -> None:
        for name, (xs, ys) in series.items():
            ax.plot(list(xs), list(ys), marker="o", markersize=3, label=short_label(name))
        for name, y in (hlines or {}).items():
            ax.axhline(y, linestyle="--", color=C2, linewidth=1, label=short_label(name))
        if log_x:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(title)
        ax.legend(frameon=False)

    return render(draw)


# --- the teaching figures the labs share ----------------------------------------------

# A histogram whose tallest bin is this many times its median non-empty bin gets a
# log count axis: otherwise the tails, where the error lives, are invisible.
LOG_COUNT_RATIO = 30.0
BYTES_PER_GB = 1e9  # memory bars are in GB (1e9 bytes), as GPU datasheets print
GRID_HEIGHT_IN = 2.6
BAR_HEIGHT_IN = 1.2  # per row of a horizontal bar chart, plus room for axes and legend
BAR_BASE_IN = 1.5
# Legends sit under the axes so they never cover a bar.
LEGEND_BELOW: dict[str, Any] = {"loc": "outside lower left", "ncols": 2}
NOTE_HEADROOM = 1.2  # linear count axis: the top is this times the tallest bar
NOTE_HEADROOM_LOG = 12.0  # log count axis: about one decade more
AXIS_TICKS = 4
LOG_COUNT_FLOOR = 0.8  # a log count axis starts just under one value
HISTOGRAM_TOP = 24.0  # points above the plot area: the title
HISTOGRAM_BOTTOM = 38.0  # below it: tick labels and the axis title
BARS_BOTTOM = 58.0  # and the legend under a bar chart
# The two parts of a quantization error, as every rounding vs clipping figure names them.
ROUNDING = "rounding (inside the range)"
CLIPPING = "clipping (beyond it)"


def needs_log_counts(counts: Sequence[float]) -> bool:
    """Whether the tallest bin dwarfs the typical one (see LOG_COUNT_RATIO)."""
    filled = sorted(c for c in counts if c > 0)
    return bool(filled) and filled[-1] > LOG_COUNT_RATIO * filled[len(filled) // 2]


def binned_histogram(
    edges: Sequence[float],
    counts: Sequence[float],
    *,
    title: str,
    x_label: str,
    note: str = "",
    log_counts: bool | None = None,
) -> str:
    """Bars of already-binned data (``len(edges) == len(counts) + 1``), as one stepped
    path. ``note`` (for instance the values beyond the range shown) is written inside
    the axes, above the tallest bar. Written without matplotlib (``labs.viz.svgplot``):
    every block-quantize run draws two."""
    if len(edges) != len(counts) + 1:
        raise ValueError("a histogram needs one more edge than counts")
    log = needs_log_counts(counts) if log_counts is None else log_counts
    peak = max(counts, default=0) or 1
    # Headroom so a note sits above the tallest bar, never on it.
    top = peak * ((NOTE_HEADROOM_LOG if log else NOTE_HEADROOM) if note else 1.05)
    # A log axis starts just under one value and has a tick at each decade only.
    floor = LOG_COUNT_FLOOR if log else 0.0
    if log:
        ticks = [10.0**k for k in range(math.floor(math.log10(top)) + 1)]
    else:
        ticks = svgplot.nice_ticks(0.0, top, AXIS_TICKS + 1)
    labels = [svgplot.count_text(t) for t in ticks] if log else svgplot.count_labels(ticks)
    margin = (HISTOGRAM_TOP, svgplot.PAD * 2, HISTOGRAM_BOTTOM, svgplot.left_margin(labels, True))
    plot = svgplot.Plot.inches(FIGURE_SIZE_IN, margin)
    plot.x_range, plot.y_range, plot.log_y = (edges[0], edges[-1]), (floor, top), log
    plot.y_axis(ticks, labels, "values (log scale)" if log else "values")
    base = plot.y(floor)
    steps = "".join(
        f"V{plot.y(max(c, floor)):.2f}H{plot.x(edges[i + 1]):.2f}" for i, c in enumerate(counts)
    )
    plot.path(f"M{plot.x(edges[0]):.2f} {base:.2f}{steps}V{base:.2f}z", fill=C1, opacity=0.85)
    x_ticks = svgplot.nice_ticks(edges[0], edges[-1], AXIS_TICKS + 1)
    plot.x_axis(x_ticks, title=x_label)
    plot.title(title)
    if note:
        _, top_y, right, _ = plot.box
        plot.text(right - 2, top_y + 2, note, anchor="end", colour=C2, baseline="hanging")
    return plot.svg()


def error_split_data(
    title: str,
    labels: Sequence[str],
    rounding: Sequence[float],
    clipping: Sequence[float],
    value_label: str = "MSE",
) -> dict[str, Any]:
    """What ``error_split_bars`` draws, stored with the figure (``kind: stacked``), so
    the compare page redraws two runs' bars on one axis (``labs.viz.inline``)."""
    return {
        "kind": "stacked",
        "title": title,
        "labels": [str(x) for x in labels],
        "parts": [
            [ROUNDING, [float(v) for v in rounding]],
            [CLIPPING, [float(v) for v in clipping]],
        ],
        "x_label": value_label,
    }


def error_split_bars(
    labels: Sequence[str],
    rounding: Sequence[float],
    clipping: Sequence[float],
    *,
    title: str,
    value_label: str = "mean squared error",
) -> str:
    """One stacked bar per row: rounding error then clipping error, each bar labelled
    with its total and the share from clipping; the legend below. Written without
    matplotlib (``labs.viz.svgplot``)."""
    names = [short_label(x) for x in labels]
    peak = max((r + c for r, c in zip(rounding, clipping, strict=True)), default=0.0)
    totals = [
        f"{readable(r + c)}" + (f", {c / (r + c):.0%} clipping" if r + c > 0 and c > 0 else "")
        for r, c in zip(rounding, clipping, strict=True)
    ]
    plot = svgplot.Plot.inches(
        _bar_size(len(names)),
        (HISTOGRAM_TOP, svgplot.PAD * 2, BARS_BOTTOM, svgplot.left_margin(names, axis_title=False)),
    )
    # Room right of the longest bar for its label: the axis reaches 1.6× the peak.
    plot.x_range = (0.0, peak * 1.6 if peak > 0 else 1.0)
    n = max(len(names), 1)
    plot.y_range = (n - 0.5, -0.5)  # row 0 at the top
    ticks = svgplot.nice_ticks(*plot.x_range, AXIS_TICKS)
    plot.x_axis(ticks, [readable(t) for t in ticks], title=value_label)
    plot.y_axis(list(range(len(names))), names, grid=False)
    for row, (r, c, total) in enumerate(zip(rounding, clipping, totals, strict=True)):
        plot.hbar(row - 0.4, row + 0.4, 0.0, r, C1)
        if c > 0:
            plot.hbar(row - 0.4, row + 0.4, r, r + c, C2)
        plot.text(plot.x(r + c) + 4, plot.y(row), total, baseline="middle")
    plot.title(title)
    plot.legend([(C1, ROUNDING), (C2, CLIPPING)])
    return plot.svg()


def value_grid(
    levels: Sequence[float],
    values: Sequence[float],
    stored: Sequence[float],
    *,
    title: str,
    x_label: str = "value",
) -> str:
    """The format's representable values (thin lines) with each input value (top row)
    joined to the value it is stored as (bottom row): rounding is a short step to a
    neighbour, clipping a long slide to the end of the grid. Written without matplotlib
    (``labs.viz.svgplot``): the lead figure of every block-quantize run on a float grid."""
    rows = ["your value", "stored as"]
    plot = svgplot.Plot.inches(
        (FIGURE_SIZE_IN[0], GRID_HEIGHT_IN),
        (HISTOGRAM_TOP, svgplot.PAD * 2, HISTOGRAM_BOTTOM, svgplot.left_margin(rows, False)),
    )
    every = [*levels, *values, *stored]
    lo, hi = min(every, default=0.0), max(every, default=1.0)
    pad = (hi - lo) * 0.04 or 1.0
    plot.x_range, plot.y_range = (lo - pad, hi + pad), (-0.4, 1.4)
    plot.segments(((g, -0.4, g, 1.4) for g in levels), stroke=MUTED, width=0.6, opacity=0.45)
    plot.segments(
        ((v, 1.0, s, 0.0) for v, s in zip(values, stored, strict=True)), stroke=MUTED, width=0.8
    )
    plot.markers(((v, 1.0) for v in values), C1)
    plot.markers(((s, 0.0) for s in stored), C2, shape="diamond", r=3.2)
    ticks = svgplot.nice_ticks(lo, hi, AXIS_TICKS + 2)
    plot.x_axis(ticks, title=x_label)
    plot.y_axis([1.0, 0.0], rows, grid=False, spine=False)
    plot.title(title)
    return plot.svg()


def memory_bars(
    rows: Mapping[str, Sequence[tuple[str, float]]],
    capacity: float,
    *,
    title: str,
    unit: str = "GB",
    capacity_label: str = "GPU memory",
    rest_label: str = "free",
) -> str:
    """One stacked bar per row of (part, size) pairs against a dashed capacity line;
    what is left is drawn as an outlined ``rest_label`` segment, an overflow is labelled."""
    colours = (C1, C3, C4, MUTED, C2)
    names = [short_label(k) for k in rows]

    def draw(ax: Any) -> None:
        seen: set[str] = set()
        peak = capacity
        for y, parts in enumerate(rows.values()):
            left = 0.0
            for i, (part, size) in enumerate(parts):
                label = part if part not in seen else None
                seen.add(part)
                ax.barh(y, size, left=left, color=colours[i % len(colours)], label=label)
                left += size
            if left < capacity:
                ax.barh(
                    y,
                    capacity - left,
                    left=left,
                    color="none",
                    edgecolor=MUTED,
                    hatch="//",
                    linewidth=0.6,
                    label=None if rest_label in seen else rest_label,
                )
                seen.add(rest_label)
                ax.text(
                    capacity,
                    y,
                    f" {readable(capacity - left)} {unit} {rest_label}",
                    va="center",
                    color=FG,
                )
            else:
                ax.text(
                    left,
                    y,
                    f" over by {readable(left - capacity)} {unit}",
                    va="center",
                    color=C2,
                )
            peak = max(peak, left)
        ax.axvline(
            capacity,
            color=C2,
            linestyle="--",
            linewidth=1.2,
            label=f"{capacity_label}: {readable(capacity)} {unit}",
        )
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        ax.set_xlim(0, peak * 1.45)
        ax.set_xlabel(unit)
        ax.set_title(title)
        ax.figure.legend(**LEGEND_BELOW)

    return render(draw, _bar_size(len(names)))


def memory_plot(
    ctx: Context,
    title: str,
    rows: Mapping[str, Sequence[tuple[str, float]]],
    capacity_bytes: float,
    *,
    caption: str,
    capacity_label: str = "GPU memory",
    rest_label: str = "free",
    figure_id: str = "memory",
) -> None:
    """Emit memory bars (sizes in bytes, drawn in GB = 1e9 bytes) as the lab's lead
    figure (id ``figure_id``), with the same numbers as its data table."""
    gb_rows = {
        name: [(part, size / BYTES_PER_GB) for part, size in parts] for name, parts in rows.items()
    }
    capacity = capacity_bytes / BYTES_PER_GB
    ctx.plot(
        title,
        memory_bars(
            gb_rows, capacity, title=title, capacity_label=capacity_label, rest_label=rest_label
        ),
        {
            "lead": True,
            "caption": caption,
            "table": {
                "columns": ["bar", "part", "GB"],
                "rows": [
                    [name, part, size] for name, parts in gb_rows.items() for part, size in parts
                ]
                + [["", capacity_label, capacity]],
            },
        },
        id=figure_id,
    )


def _bar_size(n_rows: int) -> tuple[float, float]:
    return FIGURE_SIZE_IN[0], BAR_BASE_IN + BAR_HEIGHT_IN * 0.5 * max(n_rows, 1)
