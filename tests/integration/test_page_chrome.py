"""What every page carries, checked by parsing the HTML: a real favicon, a header search
box that is never prefilled, and lesson lab boxes that say "Before you run" once."""

from __future__ import annotations

import re

import pytest
from bs4 import BeautifulSoup


def soup(r) -> BeautifulSoup:  # type: ignore[no-untyped-def]
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


def test_favicon_is_linked_and_served(read_only_client) -> None:
    page = soup(read_only_client.get("/"))
    icon = page.select_one("link[rel=icon]")
    assert icon is not None and icon["type"] == "image/svg+xml"
    svg = read_only_client.get(icon["href"])
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    ico = read_only_client.get("/favicon.ico")
    assert ico.status_code == 200 and ico.headers["content-type"] == "image/x-icon"
    assert ico.content[:4] == b"\x00\x00\x01\x00"  # the ICO signature


@pytest.mark.parametrize("path", ["/search?q=microscaling", "/notebook?q=scale", "/goto?q=nv"])
def test_header_search_box_is_never_prefilled(read_only_client, path: str) -> None:
    box = soup(read_only_client.get(path)).select_one("header #site-search")
    assert box is not None and not box.get("value")
    # its type-ahead is the Go-to box's: /goto suggestions into a listbox
    assert box["hx-get"] == "/goto" and box["role"] == "combobox"


def test_lab_boxes_say_before_you_run_once(read_only_client) -> None:
    cat = read_only_client.app.state.content.get()
    prompts = 0
    for slug in cat.lessons:
        for p in soup(read_only_client.get(f"/lessons/{slug}")).select(".predict-prompt"):
            label = p.strong.get_text(strip=True) if p.strong else ""
            rest = p.get_text(" ", strip=True).removeprefix(label).strip()
            prompts += 1
            assert not re.match(r"before (you )?run", rest, re.IGNORECASE), (slug, rest[:60])
    assert prompts >= 10


def _hits(page: BeautifulSoup) -> list[str]:
    return [a["href"] for a in page.select("#results ol.results a.nav-item")]


def test_search_results_go_past_twenty(read_only_client) -> None:
    first = soup(read_only_client.get("/search?q=scale"))
    assert len(_hits(first)) == 20
    more = first.select_one("#results a[rel=next]")
    assert more is not None and "page=2" in more["href"]
    second = soup(read_only_client.get(more["href"]))
    assert second.select_one("ol.results")["start"] == "21"
    assert _hits(second) and not set(_hits(second)) & set(_hits(first))
    assert "Results 21–" in second.select_one("#results p.muted").get_text()
    assert second.select_one("#results a[rel=prev]")["href"].endswith("page=1")
    # a bad or huge page number is a page, never an error
    for bad in ("abc", "0", "-1", "99999"):
        assert read_only_client.get(f"/search?q=scale&page={bad}").status_code == 200


def test_term_cards_say_before_running_once(read_only_client) -> None:
    cat = read_only_client.app.state.content.get()
    for slug in cat.terms:
        for dt in soup(read_only_client.get(f"/terms/{slug}")).select("#try dt"):
            if "before running" in dt.get_text().lower():
                said = dt.find_next_sibling("dd").get_text(" ", strip=True)
                assert not re.match(r"before running", said, re.IGNORECASE), (slug, said[:60])
