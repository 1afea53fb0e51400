"""Geometry of a term's terminology map: the term in the centre, related terms on a ring."""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.content import Catalogue

WIDTH, HEIGHT = 640, 420
RADIUS_X, RADIUS_Y = 235, 150


@dataclass
class Node:
    slug: str
    title: str
    x: float
    y: float
    direct: bool  # named by this card (False: only the other card names this one)


def term_map(cat: Catalogue, slug: str, limit: int = 12) -> list[Node]:
    term = cat.terms[slug]
    named = [s for s in term.front.related if s in cat.terms]
    back = sorted(
        s for s, t in cat.terms.items() if slug in t.front.related and s not in named and s != slug
    )
    slugs = (named + back)[:limit]
    nodes = []
    n = max(len(slugs), 1)
    for i, s in enumerate(slugs):
        angle = -math.pi / 2 + 2 * math.pi * i / n
        nodes.append(
            Node(
                slug=s,
                title=cat.terms[s].title,
                x=round(WIDTH / 2 + RADIUS_X * math.cos(angle), 1),
                y=round(HEIGHT / 2 + RADIUS_Y * math.sin(angle), 1),
                direct=s in named,
            )
        )
    return nodes
