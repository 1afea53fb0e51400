"""The terminology map's geometry: pills never overlap, stay inside the picture, and are
wide enough for their (estimated) labels, for every card and both layouts."""

from __future__ import annotations

import pytest

from app.content import load_catalogue
from app.settings import ROOT
from app.termmap import NARROW_WIDTH, WIDTH, Node, fit, layout, text_width


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalogue(ROOT / "content")


@pytest.mark.parametrize("width", [WIDTH, NARROW_WIDTH])
def test_every_card_map_is_apart_and_inside(cat, width: int) -> None:  # type: ignore[no-untyped-def]
    for slug, term in cat.terms.items():
        m = layout(cat.term_map(slug), term.title, width)
        boxes = [(p.x, p.y, p.x + p.w, p.y + p.h) for p in m.pills]
        for i, (x0, y0, x1, y1) in enumerate(boxes):
            assert 0 <= x0 and x1 <= m.width and 0 <= y0 and y1 <= m.height, (slug, i)
            label = m.pills[i].label
            assert text_width(label) <= m.pills[i].w, (slug, label)
            for ox0, oy0, ox1, oy1 in boxes[i + 1 :]:
                assert x1 <= ox0 or ox1 <= x0 or y1 <= oy0 or oy1 <= y0, (slug, i)
        assert m.centre_w <= m.width


def test_long_titles_are_shortened_with_an_ellipsis() -> None:
    nodes = [Node("q", "Quantization-aware training with a very long name", True)]
    pill = layout(nodes, "x", NARROW_WIDTH).pills[0]
    assert pill.label.endswith("…") and pill.x + pill.w <= NARROW_WIDTH
    assert fit("FP8", 100) == "FP8"


def test_no_related_terms_is_just_the_centre() -> None:
    m = layout([], "Lonely", WIDTH)
    assert m.pills == [] and m.height > 0
