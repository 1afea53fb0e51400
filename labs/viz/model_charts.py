"""The model labs' figures: every measured value with its 95 % interval, every point
named, axes from zero where a noise band would otherwise read as a trend. Drawn through
``labs.viz.charts.render`` (the theme and sanitiser of ``labs.viz.theme``); no torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labs.viz.charts import render, short_label
from labs.viz.theme import C1, C2, MUTED

# Figure height grows with the rows of a horizontal bar chart: inches per row, minimum.
ROW_IN = 0.32
MIN_HEIGHT_IN = 2.4
WIDTH_IN = 6.4


def _height(rows: int) -> tuple[float, float]:
    return WIDTH_IN, max(MIN_HEIGHT_IN, 1.2 + ROW_IN * rows)


def bars_data(
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    intervals: Sequence[Sequence[float] | None],
    x_label: str,
) -> dict[str, Any]:
    """What a bar figure was drawn from, stored with it (``kind: bars``), so the compare
    page redraws two runs' bars on one value axis (``labs.viz.inline.shared_bars``)."""
    return {
        "kind": "bars",
        "title": title,
        "labels": list(labels),
        "values": [float(v) for v in values],
        "low": [float(iv[0]) if iv else float(v) for v, iv in zip(values, intervals, strict=True)],
        "high": [float(iv[1]) if iv else float(v) for v, iv in zip(values, intervals, strict=True)],
        "x_label": x_label,
    }


def interval_bars(
    labels: Sequence[str],
    values: Sequence[float],
    intervals: Sequence[Sequence[float] | None],
    *,
    title: str,
    value_label: str,
    highlight: str | None = None,
    whiskers: str = "95 % interval",
) -> str:
    """Horizontal bars from zero with whiskers (a 95 % interval unless ``whiskers`` says
    otherwise), top to bottom in the order given; ``highlight`` names the bar drawn in
    the accent colour (the winner)."""
    if not len(labels) == len(values) == len(intervals):
        raise ValueError("labels, values and intervals differ in length")
    names = [short_label(x) for x in labels]
    lo = [v - iv[0] if iv else 0.0 for v, iv in zip(values, intervals, strict=True)]
    hi = [iv[1] - v if iv else 0.0 for v, iv in zip(values, intervals, strict=True)]

    def draw(ax: Any) -> None:
        colours = [C2 if x == highlight else C1 for x in labels]
        ax.barh(names, values, color=colours, xerr=[lo, hi], ecolor=MUTED, capsize=3)
        ax.invert_yaxis()
        ax.set_xlim(left=0)
        ax.set_xlabel(f"{value_label} (whiskers: {whiskers})")
        ax.set_title(title)

    return render(draw, _height(len(labels)))


def labelled_points(
    points: Sequence[tuple[str, float, float]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    line: tuple[str, str] | None = None,
) -> str:
    """Each ``(label, x, y)`` a dot with its name beside it; ``line`` joins the two
    points named (a straight trade-off to compare a third point with)."""
    by_label = {p[0]: p for p in points}

    def draw(ax: Any) -> None:
        if line and line[0] in by_label and line[1] in by_label:
            a, b = by_label[line[0]], by_label[line[1]]
            ax.plot([a[1], b[1]], [a[2], b[2]], linestyle="--", color=MUTED, linewidth=1)
        for i, (label, x, y) in enumerate(points):
            ax.plot([x], [y], marker="o", markersize=6, linestyle="", color=C2 if i == 0 else C1)
            ax.annotate(
                short_label(label), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8
            )
        ax.set_ylim(bottom=0)
        ax.margins(x=0.25, y=0.15)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(title)

    return render(draw)


def band_line(
    xs: Sequence[float],
    ys: Sequence[float],
    lows: Sequence[float],
    highs: Sequence[float],
    *,
    title: str,
    x_label: str,
    y_label: str,
) -> str:
    """A line with its 95 % band, y from zero, so a band-wide wiggle does not read as a
    trend."""

    def draw(ax: Any) -> None:
        ax.fill_between(list(xs), list(lows), list(highs), color=C1, alpha=0.25, linewidth=0)
        ax.plot(list(xs), list(ys), marker="o", markersize=3, color=C1, label="mean")
        ax.set_ylim(bottom=0, top=max(highs) * 1.15 if highs else None)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label + " (band: 95 % interval)")
        ax.set_title(title)

    return render(draw)
