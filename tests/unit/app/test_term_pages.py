"""Term pages, index, search and bad input, checked by parsing the HTML.

The tests that only read share one app (``read_only_client``); the CSRF test, which
posts, gets a fresh one."""

from __future__ import annotations

import re

import pytest
from bs4 import BeautifulSoup

from app.content import DEPTHS
from tests.conftest import csrf_headers

STARTERS = [
    "quantization",
    "quantization-error",
    "scale-factor",
    "zero-point",
    "per-channel-quantization",
    "block-quantization",
    "fp8",
    "vram",
]


def soup(r) -> BeautifulSoup:  # type: ignore[no-untyped-def]
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


def test_home_offers_a_place_to_start(read_only_client) -> None:
    page = soup(read_only_client.get("/"))
    assert page.find("h1")
    hrefs = {a["href"] for a in page.select("main a[href]")}
    assert "/terms/quantization" in hrefs
    assert any(h.startswith("/collections/") for h in hrefs)


@pytest.mark.parametrize("slug", STARTERS)
def test_starter_card_has_everything(read_only_client, slug: str) -> None:
    page = soup(read_only_client.get(f"/terms/{slug}"))
    panels = page.select('[role="tabpanel"]')
    assert [p.h2.get_text(strip=True) for p in panels] == list(DEPTHS)
    assert [p.has_attr("hidden") for p in panels] == [False, True, True, True, True]
    assert page.select_one(".definition").get_text(strip=True)
    assert page.select_one("#try dl")
    assert len(page.select("#quick-check form.quiz-item")) >= 3
    assert len(page.select("#references li a[href^='https://']")) >= 2
    assert page.select_one("nav.toc")
    # the terminology map: an SVG whose links are all real term pages
    links = [a["href"] for a in page.select("svg.termmap a")]
    assert len(links) >= 3
    for href in links:
        assert read_only_client.get(href).status_code == 200, href


def test_every_card_renders_and_every_map_link_resolves(read_only_client) -> None:
    cat = read_only_client.app.state.content.get()
    for slug in cat.terms:
        page = soup(read_only_client.get(f"/terms/{slug}"))
        for a in page.select("svg.termmap a, main a[href^='/terms/']"):
            assert a["href"].split("?")[0].split("#")[0].removeprefix("/terms/") in cat.terms, (
                slug,
                a["href"],
            )


def test_quiz_answers_are_not_in_the_page(read_only_client) -> None:
    cat = read_only_client.app.state.content.get()
    term = cat.terms["quantization"]
    html = read_only_client.get("/terms/quantization").text
    for item in term.front.quiz:
        assert item.explanation not in html
        model_answer = getattr(item, "model_answer", None)  # free-text items have one
        if model_answer:
            assert model_answer not in html


def test_depth_query_selects_panel(read_only_client) -> None:
    page = soup(read_only_client.get("/terms/fp8?depth=3"))
    visible = [p for p in page.select('[role="tabpanel"]') if not p.has_attr("hidden")]
    assert [p["data-depth"] for p in visible] == ["3"]
    assert page.select_one('[role="tab"][aria-selected="true"]')["id"] == "tab-3"


def test_htmx_gets_only_the_fragment(read_only_client) -> None:
    r = read_only_client.get("/terms/fp8?depth=2", headers={"HX-Request": "true"})
    assert r.status_code == 200 and r.headers["vary"] == "HX-Request"
    frag = BeautifulSoup(r.text, "html.parser")
    assert frag.find("html") is None and frag.select_one("section#depths")
    assert not frag.select_one("#depth-2").has_attr("hidden")


@pytest.mark.parametrize("raw", ["9", "abc", "0", "-1", "1e9", "%00"])
def test_bad_depth_falls_back_with_a_message(read_only_client, raw: str) -> None:
    page = soup(read_only_client.get(f"/terms/fp8?depth={raw}"))
    assert page.select_one(".note").get_text()
    assert not page.select_one("#depth-1").has_attr("hidden")


def test_unknown_slug_is_404_with_suggestions(read_only_client) -> None:
    r = read_only_client.get("/terms/quantisaton")
    assert r.status_code == 404
    page = BeautifulSoup(r.text, "html.parser")
    assert "/terms/quantization" in [a["href"] for a in page.select("main ul a")]


def test_index_views(read_only_client) -> None:
    for view in ("az", "domain", "collection"):
        page = soup(read_only_client.get(f"/terms?view={view}"))
        assert len(page.select("a.nav-item")) >= 8
    page = soup(read_only_client.get("/terms?view=collection"))
    titles = [h.get_text() for h in page.select("#listing h2")]
    assert "Numerics and formats" in titles


def test_search_finds_a_term_by_alias(read_only_client) -> None:
    cat = read_only_client.app.state.content.get()
    term, alias = next((t, t.front.aliases[0]) for t in cat.sorted_terms() if t.front.aliases)
    page = soup(read_only_client.get("/search", params={"q": alias}))
    assert f"/terms/{term.slug}" in [a["href"] for a in page.select("#results a")]


def test_search_highlights_snippet(read_only_client) -> None:
    page = soup(read_only_client.get("/search", params={"q": "scale"}))
    assert page.select("#results li")
    assert page.select("#results .snippet mark")


@pytest.mark.parametrize(
    "q",
    [
        '"',
        '"unbalanced',
        "AND OR NOT",
        "NEAR(a b)",
        "*",
        "col:value",
        "a^b",
        "x" * 1000,
        "'; DROP TABLE search_docs; --",
        "<script>alert(1)</script>",
        "ümlaut ß 量子化",
        "\x00",
    ],
)
def test_search_never_500s(read_only_client, q: str) -> None:
    r = read_only_client.get("/search", params={"q": q})
    assert r.status_code == 200
    assert "<script>alert(1)</script>" not in r.text


def test_goto_typeahead(read_only_client) -> None:
    r = read_only_client.get("/goto", params={"q": "quant"}, headers={"HX-Request": "true"})
    frag = BeautifulSoup(r.text, "html.parser")
    assert "/terms/quantization" in [a["href"] for a in frag.select("li a")]


def test_security_headers_and_cache(read_only_client) -> None:
    r = read_only_client.get("/terms/fp8")
    csp = r.headers["content-security-policy"]
    assert (
        "script-src 'self'" in csp
        and "unsafe-inline" not in csp
        and "frame-ancestors 'none'" in csp
    )
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-request-id"]
    page = soup(r)
    css = page.select_one("link[rel=stylesheet]")["href"]
    assert css.startswith("/static/css/app.") and css.count(".") == 2
    s = read_only_client.get(css)
    assert s.status_code == 200 and "immutable" in s.headers["cache-control"]
    assert read_only_client.get("/static/../app/settings.py").status_code == 404


def test_csrf_required_on_unsafe_methods(client) -> None:
    assert client.post("/quiz/term:fp8/x", data={"answer": "1"}).status_code == 403
    hdr = csrf_headers(client)
    assert (
        client.post(
            "/quiz/term:fp8/x", data={"answer": "1"}, headers={"X-CSRF-Token": "wrong" * 8}
        ).status_code
        == 403
    )
    assert client.post("/quiz/term:fp8/x", data={"answer": "1"}, headers=hdr).status_code != 403


def test_health(read_only_client) -> None:
    assert read_only_client.get("/healthz").json() == {"status": "ok"}
    r = read_only_client.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"]["database"] == "ok"


def test_each_learner_gets_their_own_csrf_token_in_a_card(read_only_client) -> None:
    """The card's quick-check forms are rendered once and shared: the token in them
    must still be each request's own, escaped like any other value."""
    for token in ("a" * 43, "t&o'k" + "c" * 20):  # & and ' need escaping in HTML
        read_only_client.cookies.clear()  # the shared client's own cookie would win
        read_only_client.cookies.set("lowbit_csrf", token)
        page = soup(read_only_client.get("/terms/fp8"))
        fields = page.select("#quick-check input[name=csrf_token]")
        assert fields and {f["value"] for f in fields} == {token}
    read_only_client.cookies.clear()


# Issue 20.11: a title or alias that is the query, or holds its words, ranks first (the
# Quantization card came 8th for "quantization"; "awq vs gptq" found neither card, since
# every word, "vs" included, had to match).
RANKED_FIRST = [
    ("quantization", ["/terms/quantization"]),
    ("awq vs gptq", ["/terms/awq", "/terms/gptq"]),
    ("kv cache", ["/terms/kv-cache"]),
    ("NVFP4", ["/terms/nvfp4"]),
    ("key-value cache", ["/terms/kv-cache"]),
]


def check_search_ranking(client) -> None:  # type: ignore[no-untyped-def]
    for q, first in RANKED_FIRST:
        page = soup(client.get("/search", params={"q": q}))
        hrefs = [a["href"] for a in page.select("#results a.nav-item")]
        assert sorted(hrefs[: len(first)]) == sorted(first), (q, hrefs[:8])
    # Snippets are the text a reader sees: no lab-embed or figure markup of a lesson.
    page = soup(client.get("/search", params={"q": "rtn gptq awq methods"}))
    snippets = [s.get_text(" ") for s in page.select("#results .snippet")]
    assert any("/lessons/" in a["href"] for a in page.select("#results a.nav-item"))
    for text in snippets:
        assert not re.search(r"\b(lab|params|prompt|methods|name|alt):|[{}\[\]]", text), text


def test_search_ranks_titles_and_aliases_first(read_only_client) -> None:
    check_search_ranking(read_only_client)


def test_the_lessons_page_counts_its_lessons(read_only_client) -> None:
    """Issue 20.13: the page said "Fourteen" while there were 16; the count is computed."""
    cat = read_only_client.app.state.content.get()
    page = soup(read_only_client.get("/lessons"))
    assert page.select_one(".lede").get_text().startswith(f"{len(cat.lessons)} hands-on lessons")
    assert len(page.select(".lesson-list > li")) == len(cat.lessons)
