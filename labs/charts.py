"""The teaching figures the labs share, drawn with matplotlib through labs.plots.

Each returns a sanitised, theme-coloured SVG string (``labs.plots._render``) and
is drawn in the worker; the run page shows it as an image with a data table
beside it. Imported lazily by the labs' presenters: importing a lab imports
neither this module's matplotlib nor torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from labs import plots
from labs.plots import C1, C2, C3, C4, FG, MUTED

if TYPE_CHECKING:
    from labs.base import Context

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
    """Bars of already-binned data (``len(edges) == len(counts) + 1``). ``note`` (for
    instance the values beyond the range shown) is written inside the axes."""
    if len(edges) != len(counts) + 1:
        raise ValueError("a histogram needs one more edge than counts")
    log = needs_log_counts(counts) if log_counts is None else log_counts

    def draw(ax: Any) -> None:
        ax.stairs(list(counts), list(edges), fill=True, color=C1, alpha=0.85)
        if log:
            _log_counts_axis(ax)
        ax.set_xlabel(x_label)
        ax.set_ylabel("values (log scale)" if log else "values")
        ax.set_title(title)
        ax.grid(axis="y", linewidth=0.5)
        ax.set_axisbelow(True)
        peak = max(counts, default=0) or 1
        if note:
            # Headroom so the note sits above the tallest bar, never on it.
            ax.set_ylim(top=peak * (NOTE_HEADROOM_LOG if log else NOTE_HEADROOM))
            ax.text(0.99, 0.97, note, transform=ax.transAxes, ha="right", va="top", color=C2)

    return plots._render(draw)


def _log_counts_axis(ax: Any) -> None:
    """A log count axis with ticks at the decades only, labelled 1, 10, 100, 1k, 10k… in
    plain text. matplotlib's default labels them 10ⁿ in mathtext, which a learner reads
    slower, and adds 8 unlabelled minor ticks a decade whose layout alone took 0.3 s a
    chart here."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ax.set_yscale("log")
    ax.set_ylim(bottom=0.8)
    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: count_label(v)))
    ax.yaxis.set_minor_locator(NullLocator())


def count_label(v: float) -> str:
    """1, 10, 100, 1k, 10k, 100k, 1M…: a count on a log axis."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"


def error_split_bars(
    labels: Sequence[str],
    rounding: Sequence[float],
    clipping: Sequence[float],
    *,
    title: str,
    value_label: str = "mean squared error",
) -> str:
    """One stacked bar per row: rounding error then clipping error, each bar labelled
    with its total and the share from clipping."""
    names = [plots._short(x) for x in labels]

    def draw(ax: Any) -> None:
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        ax.barh(names, rounding, color=C1, label="rounding (inside the range)")
        ax.barh(names, clipping, left=rounding, color=C2, label="clipping (beyond it)")
        ax.xaxis.set_major_locator(MaxNLocator(AXIS_TICKS))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: plots_number(v)))
        ax.invert_yaxis()
        peak = max((r + c for r, c in zip(rounding, clipping, strict=True)), default=0.0)
        for y, (r, c) in enumerate(zip(rounding, clipping, strict=True)):
            total = r + c
            share = f", {c / total:.0%} clipping" if total > 0 and c > 0 else ""
            ax.text(total + peak * 0.02, y, f"{plots_number(total)}{share}", va="center")
        ax.set_xlim(0, peak * 1.6 if peak > 0 else 1)
        ax.set_xlabel(value_label)
        ax.set_title(title)
        ax.figure.legend(**LEGEND_BELOW)

    return plots._render(draw, _bar_size(len(names)))


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
    neighbour, clipping a long slide to the end of the grid."""

    def draw(ax: Any) -> None:
        # One path each (NaN breaks the line), not a line per level: E4M3 has 253.
        ax.plot(
            *_segments([(g, -0.4, g, 1.4) for g in levels]),
            color=MUTED,
            linewidth=0.6,
            alpha=0.45,
            zorder=0,
        )
        ax.plot(
            *_segments([(v, 1, s, 0) for v, s in zip(values, stored, strict=True)]),
            color=MUTED,
            linewidth=0.8,
            zorder=1,
        )
        ax.scatter(values, [1] * len(values), color=C1, s=18, zorder=2, label="your value")
        ax.scatter(
            stored, [0] * len(stored), color=C2, s=22, marker="D", zorder=2, label="stored as"
        )
        ax.set_yticks([1, 0], ["your value", "stored as"])
        ax.set_ylim(-0.4, 1.4)
        ax.set_xlabel(x_label)
        ax.set_title(title)
        ax.spines["left"].set_visible(False)
        ax.tick_params(axis="y", length=0)

    return plots._render(draw, (plots.FIGURE_SIZE_IN[0], GRID_HEIGHT_IN))


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
    names = [plots._short(k) for k in rows]

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
                    f" {plots_number(capacity - left)} {unit} {rest_label}",
                    va="center",
                    color=FG,
                )
            else:
                ax.text(
                    left,
                    y,
                    f" over by {plots_number(left - capacity)} {unit}",
                    va="center",
                    color=C2,
                )
            peak = max(peak, left)
        ax.axvline(
            capacity,
            color=C2,
            linestyle="--",
            linewidth=1.2,
            label=f"{capacity_label}: {plots_number(capacity)} {unit}",
        )
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        ax.set_xlim(0, peak * 1.45)
        ax.set_xlabel(unit)
        ax.set_title(title)
        ax.figure.legend(**LEGEND_BELOW)

    return plots._render(draw, _bar_size(len(names)))


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


def plots_number(v: float) -> str:
    """A number for a chart label: three significant digits, no exponent noise."""
    from labs.headline import readable

    return readable(v)


def _bar_size(n_rows: int) -> tuple[float, float]:
    return plots.FIGURE_SIZE_IN[0], BAR_BASE_IN + BAR_HEIGHT_IN * 0.5 * max(n_rows, 1)


def _segments(lines: Sequence[tuple[float, float, float, float]]) -> tuple[list[float], ...]:
    """(x0, y0, x1, y1) segments as one NaN-separated polyline: a single SVG path."""
    xs: list[float] = []
    ys: list[float] = []
    for x0, y0, x1, y1 in lines:
        xs += [x0, x1, math.nan]
        ys += [y0, y1, math.nan]
    return xs, ys
