"""The one look of every figure lowbit draws: its palette, its matplotlib rcParams and
the one SVG sanitiser.

The palette is the site's (``static/css/app.css``: ``--fg``, ``--muted``, ``--line``,
``--panel``, ``--accent``, ``--accent-soft``), plus the series colours a chart needs;
each colour has a light and a dark value. Two kinds of figure use it:

- lab charts (``labs.viz.charts``), drawn in the worker per run: matplotlib draws
  *sentinel* colours that ``theme_colours`` rewrites to CSS variables (``--fg``,
  ``--c1`` …), so a chart follows the viewer's colour scheme through ``THEME_STYLE``;
- card figures (``labs.viz.cards``), committed SVGs: drawn with the light colours,
  which ``labs.viz.cards.svg`` tags with classes recoloured for dark mode.

No matplotlib here (the rcParams are plain dicts): the web process imports this module
to sanitise and theme stored charts.
"""

from __future__ import annotations

import re
from typing import Any

#: name -> (light, dark). The light values are what a figure without the page's
#: stylesheet shows on its own light background.
PALETTE: dict[str, tuple[str, str]] = {
    "bg": ("#ffffff", "#181c21"),  # --panel: a card figure sits on the card like a panel
    "fg": ("#1b1d21", "#e6e8eb"),
    "muted": ("#555b66", "#a4abb6"),
    "line": ("#d9dce1", "#2d333b"),
    "blue": ("#0b5cad", "#7db7f0"),  # --accent
    "orange": ("#c2410c", "#fb923c"),
    "green": ("#146c2e", "#6fd38a"),  # --ok
    "yellow": ("#8a6d00", "#f0c060"),
    "purple": ("#6d28d9", "#c4b5fd"),
    "teal": ("#0f766e", "#5eead4"),
    "soft": ("#e6f0fa", "#1c2a3a"),  # --accent-soft
}

# Lab charts: the CSS variable each sentinel becomes -> (sentinel, palette name). The
# variable names are stored in every chart a run kept (``var(--c1, #0b5cad)``), so they
# stay as they are; THEME_STYLE defines them.
_CHART_COLOURS: dict[str, tuple[str, str]] = {
    "fg": ("#010203", "fg"),
    "muted": ("#020304", "muted"),
    "line": ("#030405", "line"),
    "c1": ("#040506", "blue"),
    "c2": ("#050607", "orange"),
    "c3": ("#060708", "green"),
    "c4": ("#070809", "yellow"),
    "c5": ("#08090a", "purple"),
    "c6": ("#090a0b", "teal"),
}
#: CSS variable -> (sentinel drawn by matplotlib, light, dark).
THEME: dict[str, tuple[str, str, str]] = {
    var: (sentinel, *PALETTE[name]) for var, (sentinel, name) in _CHART_COLOURS.items()
}
FG, MUTED, LINE, C1, C2, C3, C4, C5, C6 = (THEME[k][0] for k in THEME)
SERIES = (C1, C2, C3, C4, C5, C6, MUTED)


def _colour_rc(fg: str, muted: str, line: str) -> dict[str, Any]:
    """The rcParams that colour text, axes, ticks and grid: ink for what is read,
    muted for what frames it, a faint line for the grid."""
    return {
        "text.color": fg,
        "axes.labelcolor": fg,
        "axes.edgecolor": muted,
        "xtick.color": muted,
        "ytick.color": muted,
        "xtick.labelcolor": fg,
        "ytick.labelcolor": fg,
        "grid.color": line,
    }


_BASE_RC: dict[str, Any] = {
    "svg.fonttype": "none",  # text stays text: selectable, and sized by the page's zoom
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
}
#: Lab charts: small, beside text, transparent on the page's own background.
CHART_RC: dict[str, Any] = {
    **_BASE_RC,
    **_colour_rc(FG, MUTED, LINE),
    "svg.hashsalt": "lowbit",  # deterministic ids
    "font.size": 10.0,
    "axes.titlesize": 10.5,
    "axes.titlelocation": "left",
    "legend.frameon": False,
}
#: Card figures: the light colours themselves, on a panel-white background.
CARD_RC: dict[str, Any] = {
    **_BASE_RC,
    **_colour_rc(PALETTE["fg"][0], PALETTE["muted"][0], PALETTE["line"][0]),
    "svg.hashsalt": "lowbit-figures",  # deterministic clip-path ids
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.facecolor": PALETTE["bg"][0],
    "figure.facecolor": PALETTE["bg"][0],
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
