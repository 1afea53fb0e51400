"""Small, self-contained SVG charts for lab results.

Rendered with matplotlib's object API (no pyplot global state) on the SVG
backend, imported lazily so importing a lab never imports matplotlib. Text
stays text (``svg.fonttype = none``), ids are deterministic, and the output is
sanitised for inlining: no XML prolog or DOCTYPE (an external DTD reference),
no ``<script>``, no event-handler attributes, no external links.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

# Small figures: they sit beside text in a lab result. Inches (72 SVG units each):
# narrow enough that 10-unit text still reads at ~10 px on a 390 px phone.
FIGURE_SIZE_IN = (5.0, 3.2)
# Hard ceiling on one chart; the run's output cap must never be spent on plots.
MAX_SVG_BYTES = 60_000
# Labels longer than this are shortened; matplotlib would squeeze the axes.
MAX_LABEL_CHARS = 28
DEFAULT_BINS = 40
MAX_BINS = 200

# Colours are drawn as sentinels and rewritten to CSS variables (``theme_colours``),
# so a chart follows the page's light or dark scheme; each has a fallback for a
# viewer that shows the SVG without the served stylesheet (``THEME_STYLE``).
THEME: dict[str, tuple[str, str, str]] = {
    # name: (sentinel drawn by matplotlib, light, dark)
    "fg": ("#010203", "#1b1d21", "#e6e8eb"),
    "muted": ("#020304", "#555b66", "#a4abb6"),
    "line": ("#030405", "#c9cdd3", "#3a414b"),
    "c1": ("#040506", "#0b5cad", "#7db7f0"),
    "c2": ("#050607", "#c2410c", "#fb923c"),
    "c3": ("#060708", "#146c2e", "#6fd38a"),
    "c4": ("#070809", "#8a6d00", "#f0c060"),
    "c5": ("#08090a", "#6d3fb5", "#c4a5f5"),
    "c6": ("#090a0b", "#0f766e", "#5eead4"),
}
FG, MUTED, LINE, C1, C2, C3, C4, C5, C6 = (THEME[k][0] for k in THEME)
SERIES = (C1, C2, C3, C4, C5, C6, MUTED)

_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "lowbit",
    "font.size": 10.0,
    "axes.titlesize": 10.5,
    "axes.titlelocation": "left",
    "text.color": FG,
    "axes.labelcolor": FG,
    "axes.edgecolor": MUTED,
    "xtick.color": MUTED,
    "ytick.color": MUTED,
    "xtick.labelcolor": FG,
    "ytick.labelcolor": FG,
    "grid.color": LINE,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
}

_XML_PROLOG = re.compile(r"<\?xml[^>]*\?>\s*", re.IGNORECASE)
_DOCTYPE = re.compile(r"<!DOCTYPE[^>]*>\s*", re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?-->\s*", re.DOTALL)
_STYLE = re.compile(r"<style\b.*?</style\s*>\s*", re.IGNORECASE | re.DOTALL)
_METADATA = re.compile(r"<metadata\b.*?</metadata\s*>\s*", re.IGNORECASE | re.DOTALL)
_SCRIPT = re.compile(r"<script\b.*?</script\s*>|<script\b[^>]*/>", re.IGNORECASE | re.DOTALL)
_FOREIGN = re.compile(r"<foreignObject\b.*?</foreignObject\s*>", re.IGNORECASE | re.DOTALL)
_EVENT_ATTR = re.compile(r"\s+on[a-z]+\s*=\s*(\"[^\"]*\"|'[^']*')", re.IGNORECASE)
_EXTERNAL_HREF = re.compile(
    r"\s+(?:xlink:)?href\s*=\s*(\"(?!#)[^\"]*\"|'(?!#)[^']*')", re.IGNORECASE
)
# id="x", href="#x" and url(#x): rewritten with a per-chart prefix so several
# charts inlined in one page never resolve each other's markers or clip paths.
_ID_REF = re.compile(r'(\bid=")([^"]+)"|(href="#)([^"]+)"|(url\(#)([^)]+)\)')


def sanitize_svg(svg: str) -> str:
    """Make an SVG string safe to inline: strip prolog, DOCTYPE, comments, RDF
    metadata, ``<style>`` (CSS in inline SVG applies to the whole page), scripts,
    ``foreignObject``, ``on*=`` handlers and any non-fragment ``href``."""
    for pattern in (
        _XML_PROLOG,
        _DOCTYPE,
        _COMMENT,
        _METADATA,
        _STYLE,
        _SCRIPT,
        _FOREIGN,
        _EVENT_ATTR,
        _EXTERNAL_HREF,
    ):
        svg = pattern.sub("", svg)
    return svg.strip()


def theme_colours(svg: str) -> str:
    """Sentinel colours as CSS variables with their light fallback (style attributes
    only: presentation attributes cannot hold ``var()``)."""
    for name, (sentinel, light, _) in THEME.items():
        svg = svg.replace(sentinel, f"var(--{name}, {light})")
    return svg


# Served with the SVG (run_plot): inside an <img> the chart is its own document, so
# it reads the viewer's colour scheme itself. Fixed text, never learner data.
THEME_STYLE = (
    "<style>:root{"
    + ";".join(f"--{k}:{light}" for k, (_, light, _) in THEME.items())
    + "}@media (prefers-color-scheme: dark){:root{"
    + ";".join(f"--{k}:{dark}" for k, (_, _, dark) in THEME.items())
    + "}}</style>"
)
_SVG_OPEN = re.compile(r"<svg\b[^>]*>")


def themed(svg: str) -> str:
    """A sanitised chart with THEME_STYLE inserted after its opening tag."""
    m = _SVG_OPEN.search(svg)
    return svg if m is None else svg[: m.end()] + THEME_STYLE + svg[m.end() :]


def _namespace_ids(svg: str) -> str:
    prefix = "lb" + hashlib.sha1(svg.encode(), usedforsecurity=False).hexdigest()[:8] + "-"

    def rewrite(m: re.Match[str]) -> str:
        if m.group(1):
            return f'{m.group(1)}{prefix}{m.group(2)}"'
        if m.group(3):
            return f'{m.group(3)}{prefix}{m.group(4)}"'
        return f"{m.group(5)}{prefix}{m.group(6)})"

    return _ID_REF.sub(rewrite, svg)


def _short(label: object) -> str:
    text = str(label)
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def _render(draw: Any, size_in: tuple[float, float] = FIGURE_SIZE_IN) -> str:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from cycler import cycler
    from matplotlib.figure import Figure

    rc = {**_RC, "axes.prop_cycle": cycler(color=list(SERIES))}
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
    names = [_short(x) for x in labels]

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

    return _render(draw)


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

    return _render(draw)


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
            ax.plot(list(xs), list(ys), marker="o", markersize=3, label=_short(name))
        for name, y in (hlines or {}).items():
            ax.axhline(y, linestyle="--", color=C2, linewidth=1, label=_short(name))
        if log_x:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(title)
        ax.legend(frameon=False)

    return _render(draw)
