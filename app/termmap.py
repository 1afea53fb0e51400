"""A term's terminology map: which terms it shows, and where their pills go.

The map is a tree, not a ring: the term sits at the top, a trunk runs down from it and
each related term hangs off the trunk on its own row. Rows never share vertical space,
so pills cannot overlap, and each pill is sized to its label so no label spills out.
Two layouts are drawn from the same nodes: a wide one (two columns either side of the
trunk) and a narrow one (one column) that phones show at about its own size, so its
13 px labels stay 13 px on screen instead of being scaled down to ~9 px.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

WIDTH = 640  # user units of the wide layout; it is shown at most 40rem (640 px) wide
NARROW_WIDTH = 360  # a 390 px phone shows it at ~358 px: labels keep their size

FONT_PX = 13.0
# Average advance of a character as a share of the font size. DejaVu Sans, the widest
# sans-serif a browser here falls back to, averages ~0.58 em on mixed-case titles; the
# margin keeps labels inside their pills in any common sans-serif.
CHAR_EM = 0.64
PAD_X = 12.0  # space between a pill's edge and its label, user units
ROW_H = 42.0  # vertical distance between rows of pills
PILL_H = 32.0
STUB = 18.0  # length of the branch from the trunk to a pill
TOP = 8.0  # margin above the centre pill
CENTRE_H = 40.0


@dataclass
class Node:
    slug: str
    title: str
    direct: bool  # named by this card (False: only the other card names this one)


@dataclass
class Pill:
    """One related term's pill: a rectangle ``x..x+w`` × ``y..y+h`` and its label."""

    slug: str
    title: str
    label: str  # the title, shortened with … when even the widest pill cannot hold it
    direct: bool
    x: float
    y: float
    w: float
    h: float
    branch_x: float  # where the branch leaves the trunk

    @property
    def text_x(self) -> float:
        return self.x + self.w / 2

    @property
    def mid_y(self) -> float:
        return self.y + self.h / 2


@dataclass
class MapLayout:
    """Everything the template draws, in user units of a ``width`` × ``height`` viewBox."""

    width: float
    height: float
    centre_label: str
    centre_x: float
    centre_y: float
    centre_w: float
    trunk_x: float
    trunk_top: float
    trunk_bottom: float
    pills: list[Pill]


def term_map(
    slug: str,
    related: list[str],
    named_by: list[str],
    titles: Mapping[str, str],
    limit: int = 12,
) -> list[Node]:
    """The terms ``slug`` relates to, then the terms that name it (``named_by``,
    sorted), at most ``limit`` (computed once when content loads)."""
    named = [s for s in related if s in titles]
    back = sorted({s for s in named_by if s not in named and s != slug})
    return [Node(slug=s, title=titles[s], direct=s in named) for s in (named + back)[:limit]]


def text_width(text: str, font_px: float = FONT_PX) -> float:
    """An upper estimate of ``text``'s rendered width in user units (no font metrics here)."""
    return len(text) * font_px * CHAR_EM


def fit(text: str, max_w: float, font_px: float = FONT_PX) -> str:
    """``text``, cut at a word or character and ended with … when wider than ``max_w``."""
    if text_width(text, font_px) <= max_w:
        return text
    keep = max(1, int(max_w / (font_px * CHAR_EM)) - 1)
    return text[:keep].rstrip(" -") + "…"


def layout(nodes: list[Node], centre_title: str, width: float = WIDTH) -> MapLayout:
    """Place ``nodes`` under the centre term: two columns when ``width`` allows, else one."""
    two_columns = width >= 2 * (STUB + 2 * PAD_X + text_width("x" * 16)) + 16
    centre_max = width - 16
    centre_label = fit(centre_title, centre_max - 2 * PAD_X, FONT_PX + 2)
    centre_w = text_width(centre_label, FONT_PX + 2) + 2 * PAD_X + 8
    trunk_x = width / 2 if two_columns else 8 + PAD_X
    centre_x = width / 2 if two_columns else 8 + centre_w / 2
    trunk_top = TOP + CENTRE_H
    pills: list[Pill] = []
    for i, n in enumerate(nodes):
        row = i // 2 if two_columns else i
        left = two_columns and i % 2 == 0
        room = (width / 2 if two_columns else width - trunk_x) - STUB - 4
        label = fit(n.title, room - 2 * PAD_X)
        w = text_width(label) + 2 * PAD_X
        y = trunk_top + 12 + row * ROW_H
        x = trunk_x - STUB - w if left else trunk_x + STUB
        pills.append(
            Pill(n.slug, n.title, label, n.direct, round(x, 1), y, round(w, 1), PILL_H, trunk_x)
        )
    last = pills[-1].y + PILL_H / 2 if pills else trunk_top
    return MapLayout(
        width=width,
        height=(pills[-1].y + PILL_H + 8) if pills else trunk_top + 8,
        centre_label=centre_label,
        centre_x=centre_x,
        centre_y=TOP + CENTRE_H / 2,
        centre_w=round(centre_w, 1),
        trunk_x=trunk_x,
        trunk_top=trunk_top,
        trunk_bottom=last,
        pills=pills,
    )
