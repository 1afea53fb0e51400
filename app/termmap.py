"""Geometry of a term's terminology map: the term in the centre, related terms on a ring."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

WIDTH, HEIGHT = 640, 420
RADIUS_X, RADIUS_Y = 235, 150


@dataclass(frozen=True)
class Node:
    slug: str
    title: str
    x: float
    y: float
    direct: bool  # named by this card (False: only the other card names this one)


def term_map(
    slug: str,
    related: list[str],
    named_by: list[str],
    titles: Mapping[str, str],
    limit: int = 12,
) -> list[Node]:
    """Nodes for the terms ``slug`` relates to, then the terms that name it
    (``named_by``, sorted), at most ``limit``, evenly on an ellipse (SVG units)."""
    named = [s for s in related if s in titles]
    back = sorted({s for s in named_by if s not in named and s != slug})
    slugs = (named + back)[:limit]
    nodes = []
    n = max(len(slugs), 1)
    for i, s in enumerate(slugs):
        angle = -math.pi / 2 + 2 * math.pi * i / n
        nodes.append(
            Node(
                slug=s,
                title=titles[s],
                x=round(WIDTH / 2 + RADIUS_X * math.cos(angle), 1),
                y=round(HEIGHT / 2 + RADIUS_Y * math.sin(angle), 1),
                direct=s in named,
            )
        )
    return nodes
