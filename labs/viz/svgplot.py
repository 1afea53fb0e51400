"""A small SVG plot writer for the lab charts drawn on every run: no matplotlib.

matplotlib lays a figure out by measuring every piece of text (constrained layout,
tick label boxes): for block-quantize's four small figures that was ~250 ms of a run's
~330 ms in the lab child, the whole difference between a 90 ms and a 330 ms run. The
charts drawn on every small run (``labs.viz.charts``: the value grid, the rounding vs
clipping bars, the binned histogram) are simple enough to write directly: axes from
"nice" ticks, text widths estimated from the font size (DejaVu Sans averages ~0.6 em a
character), one path per series. The output follows the matplotlib charts' conventions
exactly: the same size in points, text as text, colours as the theme's sentinels
(``theme_colours`` turns them into ``var(--c1, …)``), a transparent background, no ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from markupsafe import escape

from labs.viz.theme import FG, LINE, MUTED, theme_colours
from labs.viz.tiles import readable

POINTS_PER_INCH = 72
FONT = "font-family: 'DejaVu Sans', sans-serif"
FONT_SIZE = 10.0
TITLE_SIZE = 10.5
CHAR_EM = 0.62  # DejaVu Sans: a character's width in ems, a little over its average
TICK_LENGTH = 3.5
PAD = 6.0  # between a tick and its label, a label and the axis title, the edges


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """An upper estimate of ``text``'s width in points, for layout."""
    return len(text) * size * CHAR_EM


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """At most ``count`` round values inside [lo, hi], as many as fit: the smallest step
    of 1, 2, 2.5 or 5 × 10ⁿ that needs no more (matplotlib's MaxNLocator does the same)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    power = 10.0 ** math.floor(math.log10((hi - lo) / max(count, 1)))
    for step in (m * power for m in (1, 2, 2.5, 5, 10, 20, 25, 50)):
        first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
        if last - first + 1 <= count:
            break
    return [round(k * step, 12) for k in range(first, last + 1)]


def tick_text(v: float, ticks: Sequence[float]) -> str:
    """A tick label with the decimals its neighbours' spacing needs: 0.5, 1.0, 1.5;
    readable() (×10ⁿ) for the very large and the very small."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else abs(v) or 1.0
    if v == 0:
        return "0"
    if step < 1e-3 or max(abs(t) for t in ticks) >= 1e6:
        return readable(v, 2)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if step / 10**-decimals % 1 > 1e-6:  # 2.5 steps need one more
        decimals += 1
    return f"{v:,.{decimals}f}".replace("-", "−")


def count_text(v: float) -> str:
    """1, 10, 100, 1k, 10k, 100k, 1M…: a count on a log axis."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"


def count_labels(ticks: Sequence[float]) -> list[str]:
    """Labels of a linear count axis: 2k, 4k, 6k where every tick is a thousand or more,
    else 250, 500, 750, 1,000 (never 750 beside 1k)."""
    if all(t >= 1000 for t in ticks if t):
        return [count_text(t) for t in ticks]
    return [f"{t:,.0f}" if float(t).is_integer() else f"{t:g}" for t in ticks]


def _f(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


@dataclass
class Plot:
    """One set of axes in a figure of ``width`` × ``height`` points. Set the scales
    (``x_range``, ``y_range``), draw in data units, then ``svg()``. ``margin`` is
    (top, right, bottom, left) around the plot area, in points."""

    width: float
    height: float
    margin: tuple[float, float, float, float]
    x_range: tuple[float, float] = (0.0, 1.0)
    y_range: tuple[float, float] = (0.0, 1.0)
    log_y: bool = False
    parts: list[str] = field(default_factory=list)

    @classmethod
    def inches(
        cls, size_in: tuple[float, float], margin: tuple[float, float, float, float]
    ) -> Plot:
        return cls(size_in[0] * POINTS_PER_INCH, size_in[1] * POINTS_PER_INCH, margin)

    # --- coordinates -------------------------------------------------------------------
    @property
    def box(self) -> tuple[float, float, float, float]:
        """The plot area: left, top, right, bottom in points."""
        top, right, bottom, left = self.margin
        return left, top, self.width - right, self.height - bottom

    def x(self, v: float) -> float:
        left, _, right, _ = self.box
        lo, hi = self.x_range
        return left + (v - lo) / ((hi - lo) or 1.0) * (right - left)

    def y(self, v: float) -> float:
        _, top, _, bottom = self.box
        lo, hi = self.y_range
        if self.log_y:
            v, lo, hi = (math.log10(max(t, 1e-300)) for t in (v, lo, hi))
        return bottom - (v - lo) / ((hi - lo) or 1.0) * (bottom - top)

    # --- marks -------------------------------------------------------------------------
    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(
        self,
        x: float,
        y: float,
        text: str,
        *,
        anchor: str = "start",
        colour: str = FG,
        size: float = FONT_SIZE,
        rotate: bool = False,
        baseline: str = "",
    ) -> None:
        """Text at (x, y) in points; ``baseline`` "middle" or "hanging" moves it down."""
        shift = {"middle": size * 0.35, "hanging": size * 0.8}.get(baseline, 0.0)
        turn = f' transform="rotate(-90 {_f(x)} {_f(y)})"' if rotate else ""
        self.add(
            f'<text x="{_f(x)}" y="{_f(y + shift)}"{turn} style="font-size: {size:g}px; {FONT}; '
            f'text-anchor: {anchor}; fill: {colour}">{escape(text)}</text>'
        )

    def path(
        self,
        d: str,
        *,
        stroke: str = "none",
        fill: str = "none",
        width: float = 1.0,
        opacity: float = 1.0,
        dash: str = "",
    ) -> None:
        style = f"fill: {fill}; stroke: {stroke}; stroke-width: {width:g}"
        if opacity < 1:
            style += f"; opacity: {opacity:g}"
        if dash:
            style += f"; stroke-dasharray: {dash}"
        self.add(f'<path d="{d}" style="{style}"/>')

    def segments(
        self,
        lines: Iterable[tuple[float, float, float, float]],
        *,
        stroke: str,
        width: float = 1.0,
        opacity: float = 1.0,
    ) -> None:
        """Line segments (x0, y0, x1, y1) in data units, as one path."""
        d = "".join(
            f"M{_f(self.x(a))} {_f(self.y(b))}L{_f(self.x(c))} {_f(self.y(e))}"
            for a, b, c, e in lines
        )
        if d:
            self.path(d, stroke=stroke, width=width, opacity=opacity)

    def markers(
        self,
        points: Iterable[tuple[float, float]],
        colour: str,
        shape: str = "circle",
        r: float = 2.6,
    ) -> None:
        """Filled markers at data points, as one path: circles or diamonds."""
        d = []
        for px, py in points:
            x, y = self.x(px), self.y(py)
            if shape == "diamond":
                d.append(
                    f"M{_f(x)} {_f(y - r)}l{_f(r)} {_f(r)}l{_f(-r)} {_f(r)}l{_f(-r)} {_f(-r)}z"
                )
            else:
                d.append(
                    f"M{_f(x - r)} {_f(y)}a{_f(r)} {_f(r)} 0 1 0 {_f(2 * r)} 0"
                    f"a{_f(r)} {_f(r)} 0 1 0 {_f(-2 * r)} 0z"
                )
        if d:
            self.path("".join(d), fill=colour)

    def hbar(self, row_top: float, row_bottom: float, v0: float, v1: float, colour: str) -> None:
        """A horizontal bar from v0 to v1 (data) between two y positions (data)."""
        x0, x1 = self.x(v0), self.x(v1)
        y0, y1 = self.y(row_top), self.y(row_bottom)
        self.path(f"M{_f(x0)} {_f(y0)}H{_f(x1)}V{_f(y1)}H{_f(x0)}z", fill=colour)

    # --- axes --------------------------------------------------------------------------
    def x_axis(
        self, ticks: Sequence[float], labels: Sequence[str] | None = None, title: str = ""
    ) -> None:
        """The x axis with ``ticks``, labelled ``labels`` (by default ``tick_text``)."""
        labels = [tick_text(t, ticks) for t in ticks] if labels is None else labels
        left, _, right, bottom = self.box
        self.path(f"M{_f(left)} {_f(bottom)}H{_f(right)}", stroke=MUTED, width=0.8)
        marks = "".join(f"M{_f(self.x(t))} {_f(bottom)}v{TICK_LENGTH}" for t in ticks)
        self.path(marks, stroke=MUTED, width=0.8)
        for t, label in zip(ticks, labels, strict=True):
            self.text(
                self.x(t), bottom + TICK_LENGTH + 2, label, anchor="middle", baseline="hanging"
            )
        if title:
            below = bottom + TICK_LENGTH + 2 + FONT_SIZE + PAD
            self.text((left + right) / 2, below, title, anchor="middle", baseline="hanging")

    def y_axis(
        self,
        ticks: Sequence[float],
        labels: Sequence[str],
        title: str = "",
        grid: bool = True,
        spine: bool = True,
    ) -> None:
        left, top, right, bottom = self.box
        if grid:
            lines = "".join(f"M{_f(left)} {_f(self.y(t))}H{_f(right)}" for t in ticks)
            self.path(lines, stroke=LINE, width=0.5)
        if spine:
            self.path(f"M{_f(left)} {_f(top)}V{_f(bottom)}", stroke=MUTED, width=0.8)
            marks = "".join(f"M{_f(left)} {_f(self.y(t))}h{-TICK_LENGTH}" for t in ticks)
            self.path(marks, stroke=MUTED, width=0.8)
        for t, label in zip(ticks, labels, strict=True):
            self.text(left - TICK_LENGTH - 2, self.y(t), label, anchor="end", baseline="middle")
        if title:
            widest = max((text_width(s) for s in labels), default=0.0)
            x = left - TICK_LENGTH - 2 - widest - PAD
            self.text(x, (top + bottom) / 2, title, anchor="middle", rotate=True)

    def title(self, text: str) -> None:
        self.text(self.box[0], PAD, text, size=TITLE_SIZE, baseline="hanging")

    def legend(self, entries: Sequence[tuple[str, str]]) -> None:
        """Colour swatches and labels in one row along the bottom edge."""
        x, y = PAD, self.height - PAD - FONT_SIZE * 0.5
        for colour, label in entries:
            self.path(f"M{_f(x)} {_f(y - 4)}h10v8h-10z", fill=colour)
            self.text(x + 14, y, label, baseline="middle")
            x += 14 + text_width(label) + 2 * PAD

    def svg(self) -> str:
        """The figure: sized in points like matplotlib's, colours as CSS variables."""
        w, h = _f(self.width), _f(self.height)
        return theme_colours(
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}pt" height="{h}pt" '
            f'viewBox="0 0 {w} {h}" version="1.1">' + "".join(self.parts) + "</svg>"
        )


def left_margin(labels: Iterable[str], axis_title: bool) -> float:
    """Room left of the plot area for tick labels (and a rotated axis title)."""
    widest = max((text_width(s) for s in labels), default=0.0)
    return PAD + widest + TICK_LENGTH + 2 + (FONT_SIZE + PAD if axis_title else 0.0)
