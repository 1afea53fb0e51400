"""Card figures in content: the ```figure directive renders a <figure> with its image,
caption and data table; content check names file and line of a figure that is unknown,
missing or out of date; the figure route serves the committed SVG, cached by digest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from app.content import ContentError, load_catalogue
from app.settings import ROOT
from labs.viz.cards import FIGURES, FINGERPRINT_ATTR
from tests.factories import DEPTH_TEXT, make_content, write_card

FIGURE_DIR = ROOT / "content" / "figures"
FENCE = """
```figure
name: {name}
alt: "A number line with a dot at each value an E2M1 element can hold."
caption: "The *E2M1* grid."
```
"""


def _card_with(content: Path, fence: str) -> Path:
    body = "\n".join(
        f"## {d}\n\n{t.format(t='alpha')}\n" + (fence if d == "Technical understanding" else "")
        for d, t in DEPTH_TEXT.items()
    )
    return write_card(content, "alpha", ["beta", "gamma"], body=body)


def _problems(content: Path) -> list[str]:
    with pytest.raises(ContentError) as e:
        load_catalogue(content, set())
    return [str(p) for p in e.value.problems]


def _line_of(path: Path, text: str) -> int:
    return next(i for i, s in enumerate(path.read_text().splitlines(), 1) if text in s)


def test_figure_directive_renders_figure_caption_and_table(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    (content / "figures").mkdir()
    shutil.copy(FIGURE_DIR / "e2m1-grid.svg", content / "figures")
    _card_with(content, FENCE.format(name="e2m1-grid"))
    cat = load_catalogue(content, set())
    html = cat.terms["alpha"].depths_html[2]
    fig = BeautifulSoup(html, "html.parser").select_one("figure.card-figure")
    assert fig is not None
    img, caption = fig.img, fig.figcaption
    assert img is not None and caption is not None and caption.em is not None
    src = str(img["src"])
    assert src == cat.figures["e2m1-grid"].url
    assert src.startswith("/figures/e2m1-grid.") and src.endswith(".svg")
    assert str(img["alt"]).startswith("A number line")
    assert int(str(img["width"])) > 0 and int(str(img["height"])) > 0
    assert caption.em.get_text() == "E2M1"  # the caption is Markdown
    rows = fig.select("details table tbody tr")
    assert [r.find_all("td")[4].get_text() for r in rows] == [
        "0", "0.5", "1", "1.5", "2", "3", "4", "6"
    ]  # fmt: skip
    assert cat.terms["alpha"].figures[0][1].name == "e2m1-grid"


def test_unknown_or_missing_figure_names_file_and_line(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    path = _card_with(content, FENCE.format(name="no-such-figure") + FENCE.format(name="roofline"))
    out = _problems(content)
    line = _line_of(path, "name: no-such-figure")
    assert any(
        s.startswith(f"content/terms/alpha.md:{line}:") and "not one of labs.viz.cards" in s
        for s in out
    ), out
    assert any("no file content/figures/roofline.svg" in s for s in out), out


def test_stale_figure_is_reported(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    (content / "figures").mkdir()
    svg = (FIGURE_DIR / "roofline.svg").read_text()
    good = FIGURES["roofline"]().fingerprint
    assert f'{FINGERPRINT_ATTR}="{good}"' in svg
    stale = svg.replace(f'{FINGERPRINT_ATTR}="{good}"', f'{FINGERPRINT_ATTR}="0000000000000000"')
    (content / "figures" / "roofline.svg").write_text(stale)
    path = _card_with(content, FENCE.format(name="roofline"))
    line = _line_of(path, "name: roofline")
    out = _problems(content)
    assert any(s.startswith(f"content/terms/alpha.md:{line}:") and "out of date" in s for s in out)


def test_bad_figure_block_is_reported(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    _card_with(content, "\n```figure\nname: e2m1-grid\ncaption: no alt text here\n```\n")
    out = _problems(content)
    assert any("bad ```figure block" in s and "alt" in s for s in out), out


def test_every_real_figure_is_used_and_every_card_figure_is_current() -> None:
    cat = load_catalogue(ROOT / "content", None)
    used = {ref.name for t in cat.terms.values() for _, ref in t.figures}
    assert used == set(FIGURES) == set(cat.figures)
    wired = {s for s, t in cat.terms.items() if t.figures}
    assert {"nvfp4", "mxfp4", "gguf", "block-quantization", "roofline-model",
            "arithmetic-intensity", "paged-attention", "kv-cache"} <= wired  # fmt: skip


def test_card_page_shows_the_figure_and_the_route_serves_it(read_only_client) -> None:
    r = read_only_client.get("/terms/roofline-model?depth=3")
    assert r.status_code == 200
    page = BeautifulSoup(r.text, "html.parser")
    img = page.select_one("figure.card-figure img")
    assert img is not None
    svg = read_only_client.get(img["src"])
    assert svg.status_code == 200
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert "immutable" in svg.headers["cache-control"]
    assert svg.content == (FIGURE_DIR / "roofline.svg").read_bytes()
    plain = read_only_client.get("/figures/roofline.svg")
    assert plain.status_code == 200 and "immutable" not in plain.headers["cache-control"]
    for bad in ("/figures/roofline.0000000000.svg", "/figures/nope.svg", "/figures/roofline.png"):
        assert read_only_client.get(bad).status_code == 404, bad


def test_related_list_names_every_relation_beyond_the_maps_twelve(read_only_client) -> None:
    cat = read_only_client.app.state.content.get()
    term = cat.terms["fp8"]
    assert len(term.front.related) > 12  # more than the map shows
    page = BeautifulSoup(read_only_client.get("/terms/fp8").text, "html.parser")
    listed = [str(a["href"]) for a in page.select("ul.related-list a")]
    assert [f"/terms/{s}" for s in term.front.related] == listed[: len(term.front.related)]
    assert len(page.select("svg.termmap.wide a")) == 12
