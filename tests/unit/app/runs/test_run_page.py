"""The run page's result body, parsed: headline tiles first, then one lead figure, then
the detail tables; the raw result only behind a collapsed "Result (JSON)"; figures are
library SVGs served as images that follow the colour scheme."""

from __future__ import annotations

from typing import Any

import pytest
from bs4 import BeautifulSoup

from tests.unit.labs.helpers import run_lab


def _stored_run(client: Any, lab_id: str, params: dict[str, Any]) -> str:
    """A finished run of ``lab_id`` (run here, as the worker runs it) stored with its
    events under the client's learner; returns its id."""
    from app.db import Run, RunEvent
    from app.deps import ensure_learner
    from app.middleware import session_serializer
    from labs.registry import get_lab

    client.get("/")
    learner = session_serializer(client.app.state.settings).loads(client.cookies["lowbit_session"])[
        "l"
    ]
    lab = get_lab(lab_id)
    assert lab is not None
    result, events = run_lab(lab, params)
    with client.app.state.sessionmaker() as s:
        ensure_learner(s, learner)
        run = Run(
            learner_id=learner,
            lab_id=lab_id,
            status="succeeded",
            params=lab.validate(params).model_dump(mode="json"),
            result=result.model_dump(mode="json"),
            environment={"device": "cpu"},
        )
        s.add(run)
        s.flush()
        for seq, (kind, data) in enumerate(events, start=1):
            s.add(RunEvent(run_id=run.id, seq=seq, kind=kind, data=data))
        s.commit()
        return run.id


@pytest.fixture
def bq_page(client: Any) -> tuple[Any, str, BeautifulSoup]:
    run_id = _stored_run(client, "block-quantize", {"format": "nvfp4", "distribution": "outliers"})
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    return client, run_id, BeautifulSoup(page.text, "html.parser")


def test_tiles_come_before_the_first_figure_and_the_tables(bq_page: Any) -> None:
    _, _, soup = bq_page
    result = soup.select_one("section.run section.result")
    assert result is not None
    order = [
        el.name if el.name != "li" else "tile"
        for el in result.find_all(["li", "figure", "table"])
        if el.name != "li" or "tile" in (el.get("class") or [])
    ]
    assert order[0] == "tile" and "figure" in order
    first_figure = order.index("figure")
    assert set(order[:first_figure]) == {"tile"} and len(order[:first_figure]) == 5
    lead = result.select_one(".lead-figure figure.plot")
    assert lead is not None and lead.has_attr("data-lead")
    assert "E2M1 grid" in lead.figcaption.get_text()
    labels = [t.get_text(strip=True) for t in result.select(".tile-label")]
    assert labels == [
        "Bits per value",
        "Stored bytes",
        "SQNR",
        "Rounding vs clipping MSE",
        "Values clipped",
    ]
    bits = result.select_one(".tile .tile-value summary strong")
    assert bits is not None and bits.get_text() == "4.5 bits"
    # The exact value is one click away, and in the summary's title.
    exact = result.select_one(".tile .tile-exact code")
    assert exact is not None and exact.get_text().startswith("4.5")


def test_raw_result_only_behind_a_collapsed_details(bq_page: Any) -> None:
    _, _, soup = bq_page
    boxes = soup.select("section.run details.result-json")
    assert len(boxes) == 1 and not boxes[0].has_attr("open")
    assert boxes[0].summary.get_text(strip=True) == "Result (JSON)"
    assert "first_blocks" in boxes[0].pre.get_text()
    # No key/value dump of the result outside it.
    outside = soup.select_one("section.run section.result").get_text()
    assert "first_blocks" not in outside.replace(boxes[0].get_text(), "")
    assert not soup.select("section.run [style]")  # the CSP forbids inline styles


def test_every_figure_has_a_caption_and_a_data_table(bq_page: Any) -> None:
    client, run_id, soup = bq_page
    figures = soup.select("section.run figure.plot")
    assert len(figures) == 4
    for fig in figures:
        img = fig.select_one("img")
        assert img is not None and img["alt"] and fig.figcaption.get_text(strip=True)
        assert fig.select_one("details table") is not None
        svg = client.get(img["src"])
        assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg")
        # Colours are CSS variables the served stylesheet sets per colour scheme.
        assert "prefers-color-scheme: dark" in svg.text and "var(--fg" in svg.text
        assert "<script" not in svg.text.lower()
    values = next(f for f in figures if "values (nvfp4)" in f.figcaption.get_text())
    assert "beyond the range shown" in values.figcaption.get_text()


def test_a_partial_result_falls_back_to_its_numeric_outputs(client: Any) -> None:
    from labs.registry import get_lab

    lab = get_lab("memory-budget")
    assert lab is not None
    tiles = lab.tiles({"weights_gb": 141.1, "finding": "It does not fit on one H100."})
    assert [t.text for t in tiles][:1] == ["141 GB"]


def test_compare_shows_deltas_ratios_words_and_both_figures(client: Any) -> None:
    a = _stored_run(client, "block-quantize", {"format": "nvfp4", "seed": 1})
    b = _stored_run(client, "block-quantize", {"format": "mxfp4", "seed": 1})
    page = client.get(f"/runs/compare?a={a}&b={b}")
    assert page.status_code == 200
    soup = BeautifulSoup(page.text, "html.parser")
    tiles = soup.select_one("table.compare-tiles")
    assert tiles is not None
    rows = {tr.th.get_text(strip=True): tr for tr in tiles.select("tbody tr")}
    bits = [td.get_text(strip=True) for td in rows["Bits per value"].select("td")]
    assert bits[0] == "4.5 bits" and bits[1] == "4.25 bits"
    assert bits[2].startswith("−0.25") and bits[3].endswith("×")  # B − A and B ÷ A
    # Both runs' lead figures (block 0 on the E2M1 grid) side by side.
    leads = soup.select(".compare-figures figure.plot img")
    assert len(leads) == 2 and {img["src"].split("/")[2] for img in leads} == {a, b}
    # Words, not snake_case keys; the key stays in the row's title.
    labels = [th.get_text(strip=True) for th in soup.select("table.compare tbody th")]
    assert "Metrics › SQNR dB" in labels and not any("_" in x for x in labels)
    assert soup.select_one("details.compare-same") is not None
    assert not soup.select("[style]")


def test_human_labels() -> None:
    from app.runs.views import DiffRow, human_label

    assert human_label("metrics.sqnr_db") == "Metrics › SQNR dB"
    assert human_label("first_blocks.0.scale") == "First blocks › #1 › scale"
    assert human_label("kv_bytes_per_token") == "KV bytes per token"
    row = DiffRow("x", 2, 3)
    assert (row.delta, row.ratio) == (1.0, 1.5)
    assert DiffRow("x", True, False).delta is None and DiffRow("x", 0, 1).ratio is None


def test_paired_histograms_share_their_axes(client: Any) -> None:
    # Issue 20 item 7: q6_k's errors drawn alone filled the axis as q4_k's did, 16× larger.
    a = _stored_run(client, "block-quantize", {"format": "q4_k", "shape": [64, 256]})
    b = _stored_run(client, "block-quantize", {"format": "q6_k", "shape": [64, 256]})
    soup = BeautifulSoup(client.get(f"/runs/compare?a={a}&b={b}").text, "html.parser")
    # The lead figure, rounding vs clipping: q4_k's MSE (~5×10⁻³) and q6_k's (~3×10⁻⁴)
    # each filled their own axis, so the two bars looked the same length.
    lead = soup.select(".compare-lead-shared figure.plot svg.chart")
    assert len(lead) == 2
    lead_ticks = [[t.get_text() for t in c.select("g > text")] for c in lead]
    assert lead_ticks[0][1:] == lead_ticks[1][1:]  # one axis (all but the bar's own label)
    widths = [sum(float(r["width"]) for r in c.select("rect")) for c in lead]
    assert widths[1] < widths[0] / 5  # q6_k's error is visibly the smaller one
    tips = " ".join(t.get_text() for t in lead[0].select("rect title"))
    assert "rounding (inside the range)" in tips and "clipping (beyond it)" in tips
    # Then the errors histograms, on their own shared axes.
    charts = soup.select(".compare-shared figure.plot svg.chart")
    assert len(charts) == 2
    ticks = [[t.get_text() for t in c.select("g > text")] for c in charts]
    assert ticks[0] == ticks[1]  # same x ticks and the same count scale
    bars = [[float(r["width"]) for r in c.select("rect")] for c in charts]
    assert sum(bars[1]) < sum(bars[0]) / 3  # q6_k has 4x finer steps: its errors look narrow
    # no e-notation and no flattened keys in view: those sit behind a click
    visible = soup.select_one("table.compare-tiles").get_text(" ")
    assert "e+0" not in visible and "e-0" not in visible
    assert soup.select_one("details.compare-results") is not None


def test_paired_model_figures_share_their_value_axis(client: Any) -> None:
    """Issue 20 item 7 for the model labs: q4_0's SQNR bars (~21 dB) and q8_0's (~45 dB)
    each filled their own plot, so the two formats looked alike side by side."""
    small = {"eval_tokens": 512}
    a = _stored_run(client, "model-quality", {"format": "q4_0", **small})
    b = _stored_run(client, "model-quality", {"format": "q8_0", **small})
    soup = BeautifulSoup(client.get(f"/runs/compare?a={a}&b={b}").text, "html.parser")
    # the lead pair itself, redrawn (or, where the lead is another figure, the pair below)
    charts = soup.select(".compare-figures figure.plot svg.chart")
    assert len(charts) == 2
    ticks = [[t.get_text() for t in c.select("g > text")][-7:] for c in charts]
    assert ticks[0] == ticks[1]  # the same value axis (its ticks and label)
    widths = [sum(float(r["width"]) for r in c.select("rect")) for c in charts]
    assert widths[0] < widths[1] * 0.7  # q4_0's bars are visibly shorter than q8_0's
    titles = [c.select_one("title").get_text() for c in charts]
    assert "q4_0" in titles[0] and "q8_0" in titles[1]


def test_the_shared_page_reads_like_the_run_page(client: Any) -> None:
    from app.db import RunShare

    run_id = _stored_run(client, "block-quantize", {"format": "nvfp4", "shape": [1024, 2304]})
    with client.app.state.sessionmaker() as s:
        s.add(RunShare(token="t" * 32, run_id=run_id))
        s.commit()
    page = client.get("/shared/" + "t" * 32)
    soup = BeautifulSoup(page.text, "html.parser")
    tiles = soup.select(".shared-run ul.tiles li.tile")
    assert tiles, "no tiles"
    texts = [t.select_one(".tile-value strong").get_text() for t in tiles]
    assert any(t.endswith(("KiB", "MiB")) for t in texts), texts
    first = soup.select_one(".shared-run .result").find(["ul", "figure", "table"])
    assert first.name == "ul"  # tiles first, not a 32-row table of codes
    assert "e+0" not in soup.select_one(".shared-run").get_text(" ")
    imgs = [i["src"] for i in soup.select(".shared-run figure.plot img")]
    assert imgs and all(src.startswith("/shared/" + "t" * 32 + "/plots/") for src in imgs)
    assert run_id not in page.text


HOSTILE_SVG = (
    '<?xml version="1.0"?><!DOCTYPE svg SYSTEM "https://evil.example/x.dtd">'
    '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script>'
    '<foreignObject><iframe src="https://evil.example/"></iframe></foreignObject>'
    '<a href="https://evil.example/"><rect width="1" height="1"/></a></svg>'
)


def test_a_hostile_figure_is_sanitised_when_stored_and_served_clean(client: Any) -> None:
    """The worker's store sanitises a figure once (``claims.append_events``); the owner's
    and a share link's plot URLs serve it as stored."""
    from app.db import Run, RunEvent, RunShare
    from app.deps import ensure_learner
    from app.middleware import session_serializer
    from app.runs import claims
    from labs.viz.theme import sanitize_svg

    client.get("/")
    learner = session_serializer(client.app.state.settings).loads(client.cookies["lowbit_session"])[
        "l"
    ]
    factory = client.app.state.sessionmaker
    with factory() as s:
        ensure_learner(s, learner)
        run = Run(
            learner_id=learner, lab_id="block-quantize", status="running", worker_id="w1", params={}
        )
        s.add(run)
        s.flush()
        s.add(RunShare(token="h" * 32, run_id=run.id))
        s.commit()
        run_id = run.id
    assert claims.append_events(
        factory, run_id, "w1", [("plot", {"title": "t", "svg": HOSTILE_SVG})]
    )
    with factory() as s:
        stored = s.query(RunEvent).filter_by(run_id=run_id, seq=1).one().data["svg"]
    assert stored == sanitize_svg(HOSTILE_SVG)
    for url in (f"/runs/{run_id}/plots/1.svg", f"/shared/{'h' * 32}/plots/1.svg"):
        served = client.get(url)
        assert served.status_code == 200 and served.text.startswith("<svg")
        for bad in ("<script", "onload", "foreignobject", "<!doctype", "<?xml", "evil.example"):
            assert bad not in served.text.lower(), (url, bad)


@pytest.mark.parametrize(
    ("lab_id", "a_params", "b_params"),
    [
        ("kv-quant", {"kv_format": "int4"}, {"kv_format": "int8"}),
        ("tensor-sensitivity", {"format": "int4"}, {"format": "int8"}),
        ("quant-algorithms", {"format": "int4"}, {"format": "q4_0"}),
    ],
)
def test_every_model_labs_bars_share_one_axis_on_compare(
    client: Any, lab_id: str, a_params: dict[str, Any], b_params: dict[str, Any]
) -> None:
    """kv-quant's KL by position, tensor-sensitivity's KL of each unit and quant-algorithms'
    held-out KL by method were drawn alone on each run, each filling its own axis; on the
    compare page they share one, bars in the first run's order (a ranking may differ)."""
    small: dict[str, Any] = {"eval_tokens": 512}
    if lab_id == "quant-algorithms":
        small |= {"methods": ["rtn", "gptq"], "calibration_tokens": 256}
    if lab_id == "tensor-sensitivity":
        small |= {"uniform": ["q8_0"]}
    a = _stored_run(client, lab_id, {**a_params, **small})
    b = _stored_run(client, lab_id, {**b_params, **small})
    soup = BeautifulSoup(client.get(f"/runs/compare?a={a}&b={b}").text, "html.parser")
    charts = soup.select(".compare-figures figure.plot svg.chart")
    assert len(charts) == 2, soup.select_one("main").get_text(" ")[:2000]
    texts = [[t.get_text() for t in c.select("g > text")] for c in charts]
    n = len(texts[0]) // 2  # half the texts are bar labels, then the axis ticks and title
    assert texts[0][-7:] == texts[1][-7:]  # the same value axis (its ticks and label)
    labels = [[t for t in c if t in texts[0][:n]] for c in texts]
    assert labels[0] == labels[1]  # the same bars in the same order
    tips = [[r.select_one("title").get_text() for r in c.select("rect")] for c in charts]
    assert [t.split(":")[0] for t in tips[0]] == [t.split(":")[0] for t in tips[1]]
