"""labs.viz.inline: the charts the compare page writes as inline SVG text, CSP-clean
(no style attributes, no scripts) with every text escaped."""

from __future__ import annotations

from bs4 import BeautifulSoup

from labs.viz.inline import histogram_svg


def test_histogram_is_escaped_and_csp_clean() -> None:
    svg = BeautifulSoup(
        str(histogram_svg("errors <b>", [0.0, 0.5, 1.0], [2, 6], "x")), "html.parser"
    )
    assert len(svg.select("rect")) == 2 and svg.find("b") is None  # text is escaped
    assert not svg.select("[style]") and not svg.select("script")


def test_bars_take_the_themes_first_series_colour() -> None:
    """The same blue as the lab charts' bars; the page's ``.chart .bar`` rule gives it
    the dark scheme's value."""
    from labs.viz.theme import PALETTE

    svg = BeautifulSoup(str(histogram_svg("t", [0.0, 1.0, 2.0], [3, 1], "x")), "html.parser")
    rects = svg.select("rect")
    assert rects and all(r["fill"] == PALETTE["blue"][0] and "bar" in r["class"] for r in rects)
