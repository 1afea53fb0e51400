"""Presentation helpers for run pages: value formatting, flattening and diffing
two runs, and the server-sent event wire format. No torch, no web framework."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from labs.headline import human_label, readable, tile

# Values shown in a table cell before "…"; long lists (codes, histograms) are cut.
MAX_LIST_SHOWN = 16
MAX_TEXT_SHOWN = 200
SIGNIFICANT_DIGITS = 6
# A float this far from zero that is a whole number reads as one (a byte count).
LARGEST_EXACT_FLOAT_INT = 2**53
# Nesting kept as separate rows when flattening for a comparison.
MAX_FLATTEN_DEPTH = 4


def format_value(v: Any) -> str:
    """A compact, readable rendering of a result value."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v.is_integer() and abs(v) < LARGEST_EXACT_FLOAT_INT:
            return format_value(int(v))
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):  # 1.23×10⁻⁴, never 1.23e-04
            return readable(v, SIGNIFICANT_DIGITS)
        return f"{v:.{SIGNIFICANT_DIGITS}g}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, list | tuple):
        # Read as a list of numbers or words, not as Python's repr with brackets.
        shown = ", ".join(format_value(x) for x in v[:MAX_LIST_SHOWN])
        more = f", … ({len(v)} values)" if len(v) > MAX_LIST_SHOWN else ""
        return clip(f"{shown}{more}") if v else "none"
    if isinstance(v, dict):
        return clip(format_params(v))
    return clip(str(v))


def quantity(value: Any, unit: str = "") -> str:
    """A number with its unit as a tile shows it: bytes with a binary prefix (a signed
    difference keeps its sign: '−4.13 MiB'), '%' beside its number, three significant
    digits."""
    if not _number(value):
        return format_value(value)
    text = tile("", abs(value), unit).text
    return f"−{text}" if value < 0 else text


def clip(text: str, limit: int = MAX_TEXT_SHOWN) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, ending in "…"."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    # Cut at the last space unless that drops most of the text (one very long word).
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;·") + "…"


def format_params(params: dict[str, Any] | None) -> str:
    """A run's parameters as a learner reads them: ``format int4 · shape 256, 256``;
    unset (``None``) values are left out, and no parameters read "defaults"."""
    shown = [
        f"{str(k).replace('_', ' ')} {format_value(v)}"
        for k, v in (params or {}).items()
        if v is not None
    ]
    return " · ".join(shown) or "defaults"


def flatten(obj: Any, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """Nested dicts (and lists of dicts) as ``a.b.0.c`` keys; lists of scalars stay whole."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict) and depth < MAX_FLATTEN_DEPTH:
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}.", depth + 1))
    elif (
        isinstance(obj, list)
        and obj
        and all(isinstance(x, dict) for x in obj)
        and depth < MAX_FLATTEN_DEPTH
        and len(obj) <= MAX_LIST_SHOWN
    ):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}.", depth + 1))
    else:
        out[prefix.rstrip(".") or "value"] = obj
    return out


@dataclass(frozen=True)
class DiffRow:
    key: str
    a: Any
    b: Any
    title: str = ""  # the words the lab's form uses for this key, where it has its own

    @property
    def same(self) -> bool:
        return self.a == self.b

    @property
    def label(self) -> str:
        return self.title or human_label(self.key)

    @property
    def delta(self) -> float | None:
        """b − a for two numbers (not booleans), else None."""
        if _number(self.a) and _number(self.b) and not self.same:
            return float(self.b) - float(self.a)
        return None

    @property
    def ratio(self) -> float | None:
        """b / a for two numbers with a ≠ 0, else None."""
        if self.delta is not None and float(self.a) != 0:
            return float(self.b) / float(self.a)
        return None


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def diff(
    a: dict[str, Any] | None, b: dict[str, Any] | None, titles: dict[str, str] | None = None
) -> list[DiffRow]:
    """Rows of both flattened dicts in a's key order, then keys only b has; ``titles``
    names keys in words of their own (a lab form's field titles)."""
    fa, fb = flatten(a or {}), flatten(b or {})
    keys = list(fa) + [k for k in fb if k not in fa]
    return [DiffRow(k, fa.get(k), fb.get(k), (titles or {}).get(k, "")) for k in keys]


@dataclass(frozen=True)
class ResultBody:
    """A finished run's output events in the order its page shows them: notices
    (what the run could not do) first, the lead figure, tables, the other figures,
    then the metrics."""

    notices: list[dict[str, Any]]
    lead: dict[str, Any] | None
    details: list[dict[str, Any]]
    figures: list[dict[str, Any]]
    metrics: list[dict[str, Any]]


def arrange_outputs(outputs: list[dict[str, Any]]) -> ResultBody:
    """The lead figure is the plot its lab's ``present`` marked ``lead``, else the first plot."""
    plots = [e for e in outputs if e["kind"] == "plot"]
    lead = next((e for e in plots if (e["data"].get("data") or {}).get("lead")), None)
    lead = lead or (plots[0] if plots else None)
    return ResultBody(
        notices=[e for e in outputs if e["kind"] == "notice"],
        lead=lead,
        details=[e for e in outputs if e["kind"] == "table"],
        figures=[e for e in plots if e is not lead],
        metrics=[e for e in outputs if e["kind"] == "metric"],
    )


def shared_histograms(leads: Sequence[dict[str, Any] | None]) -> list[Markup] | None:
    """Two runs' paired histogram figures drawn on one x range and one count scale
    (each drawn alone, q6_k's errors filled the axis as q4_k's 16× larger ones did);
    None unless both figures are histograms."""
    data = [((e or {}).get("data") or {}).get("data") or {} for e in leads]
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
    """Two runs' paired bar figures (model-quality's SQNR by kind of weight) redrawn on
    one value axis: drawn alone on the worker, q4_0's 21 dB and q8_0's 45 dB bars both
    filled their plots. None unless both are bar figures with the same labels."""
    data = [((e or {}).get("data") or {}).get("data") or {} for e in leads]
    if len(data) != 2 or not all(d.get("kind") == "bars" and d.get("labels") for d in data):
        return None
    if data[0]["labels"] != data[1]["labels"]:
        return None
    hi = max(max([*d["values"], *(d.get("high") or [])], default=0.0) for d in data) or 1.0
    return [bars_svg(d, hi) for d in data]


def bars_svg(d: dict[str, Any], hi: float) -> Markup:
    """Horizontal bars from zero to ``hi`` with optional low-high whiskers, as inline
    SVG in the style of ``histogram_svg`` (presentation attributes, ``currentColor``)."""
    labels, values = list(d["labels"]), [float(v) for v in d["values"]]
    low, high = d.get("low") or [], d.get("high") or []
    top, right, bottom, left = CHART_MARGIN[0], CHART_MARGIN[1], CHART_MARGIN[2], 96
    row = 22
    w, h = CHART_WIDTH - left - right, row * len(labels)
    height = h + top + bottom
    title = str(d.get("title") or "")
    parts = _chart_open(title, height, (left, top), (w, h))
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        y = i * row + 3
        span = f", {format_value(low[i])} to {format_value(high[i])}" if i < len(high) else ""
        parts.append(
            f'<rect x="0" y="{y}" width="{max(v, 0) / hi * w:.2f}" height="{row - 6}" fill-opacity="0.75">'
            f"<title>{escape(str(label))}: {escape(format_value(v))}{escape(span)}</title></rect>"
        )
        if i < len(high) and i < len(low):
            x0, x1, ym = float(low[i]) / hi * w, float(high[i]) / hi * w, y + (row - 6) / 2
            parts.append(
                f'<line x1="{x0:.2f}" y1="{ym:.1f}" x2="{x1:.2f}" y2="{ym:.1f}" stroke="currentColor"/>'
            )
        parts.append(
            f'<text x="-6" y="{y + row / 2:.1f}" text-anchor="end">{escape(str(label))}</text>'
        )
    for k in range(CHART_TICKS + 1):
        x = w * k / CHART_TICKS
        parts.append(
            f'<text x="{x:.1f}" y="{h + 16}" text-anchor="middle">{escape(format_value(hi * k / CHART_TICKS))}</text>'
        )
    return _chart_close(parts, (w, h), str(d.get("x_label") or ""))


def sse(event: str, data: str, event_id: int | None = None) -> str:
    """One server-sent event; multi-line ``data`` becomes several ``data:`` lines."""
    lines = [f"id: {event_id}"] if event_id is not None else []
    lines.append(f"event: {event}")
    lines += [f"data: {line}" for line in (data.splitlines() or [""])]
    return "\n".join(lines) + "\n\n"


def latest_progress(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    for e in reversed(events):
        if e["kind"] == "progress":
            return dict(e["data"])
    return None


# Histogram drawing area, in SVG user units (the image scales with the page).
CHART_WIDTH = 640
CHART_HEIGHT = 240
CHART_MARGIN = (12, 12, 44, 56)  # top, right, bottom, left
CHART_TICKS = 5


def histogram_svg(
    title: str,
    edges: list[float],
    counts: list[int],
    x_label: str = "",
    x_range: tuple[float, float] | None = None,
    peak: int | None = None,
) -> Markup:
    """A bar chart of binned data as inline SVG: presentation attributes only (no
    ``style``, so the page's CSP allows it), colours from ``currentColor``, a
    ``<title>`` per bar for its exact range and count. ``x_range`` and ``peak`` fix the
    axes, so two histograms drawn side by side read on the same scale."""
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
            f'<rect x="{x0:.2f}" y="{h - bh:.2f}" width="{bw:.2f}" height="{bh:.2f}" fill-opacity="0.75">'
            f"<title>{escape(format_value(edges[i]))} to {escape(format_value(edges[i + 1]))}: {c}</title></rect>"
        )
    for k in range(CHART_TICKS + 1):
        v = lo + span * k / CHART_TICKS
        x = w * k / CHART_TICKS
        parts.append(
            f'<text x="{x:.1f}" y="{h + 16}" text-anchor="middle">{escape(format_value(v))}</text>'
        )
        y = h - h * k / CHART_TICKS
        parts.append(
            f'<text x="-6" y="{y + 4:.1f}" text-anchor="end">{escape(format_value(round(peak * k / CHART_TICKS)))}</text>'
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
