"""Defect 4 (issue 14): a lab page's run history and "Compare with" follow the runs
that start and end on it, and parameters read as words, not JSON with nulls."""

from __future__ import annotations

from bs4 import BeautifulSoup

from tests.unit.app.flows.helpers import make_run

HX = {"HX-Request": "true"}


def test_run_responses_announce_start_and_end_and_the_history_listens(learner) -> None:
    doc = BeautifulSoup(learner.get("/labs/block-quantize").text, "html.parser")
    history = doc.select_one("#lab-history")
    assert history["hx-get"] == "/labs/block-quantize/history"
    assert "run-started from:body" in history["hx-trigger"]
    assert "run-ended from:body" in history["hx-trigger"]
    r = learner.post(
        "/labs/block-quantize/runs",
        data={"format": "int4", "csrf_token": learner.headers["X-CSRF-Token"]},
        headers=HX,
    )
    assert r.status_code == 200 and r.headers["HX-Trigger"] == "run-started"
    done = make_run(learner)
    assert learner.get(f"/runs/{done}", headers=HX).headers["HX-Trigger"] == "run-ended"
    assert "HX-Trigger" not in learner.get(f"/runs/{done}").headers  # a full page: no event
    fragment = BeautifulSoup(
        learner.get("/labs/block-quantize/history", headers=HX).text, "html.parser"
    )
    assert fragment.select_one("section#lab-history") is not None
    ids = {box["value"] for box in fragment.select("input[name=run]")}
    assert done in ids and len(ids) == 2  # the queued run and the finished one


def test_parameters_read_as_words_without_nulls(learner) -> None:
    first, second = make_run(learner), make_run(learner)
    table = BeautifulSoup(learner.get("/labs/block-quantize").text, "html.parser")
    cells = [
        tr.select("td")[3].get_text(strip=True) for tr in table.select("#lab-history tbody tr")
    ]
    assert cells == ["format int4 · shape 256, 256 · seed 0"] * 2
    page = BeautifulSoup(learner.get(f"/runs/{second}").text, "html.parser")
    option = page.select_one("select[name=b] option").get_text()
    assert option.endswith("succeeded · format int4 · shape 256, 256 · seed 0")
    params = {
        th.text: td.text
        for th, td in zip(
            page.select("details.params th"), page.select("details.params td"), strict=True
        )
    }
    assert params == {"Format": "int4", "shape": "256, 256", "seed": "0"}  # as the form names them
    for text in (table.text, page.text):
        assert "null" not in text and "None" not in text and '"values"' not in text
    assert first != second
