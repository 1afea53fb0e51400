"""Defects 2 and 3 (issue 14): the verdict comes first with every actual value, and a
prediction that is not a number keeps what was typed, marked, with its message beside it."""

from __future__ import annotations

from bs4 import BeautifulSoup

from tests.unit.app.flows.helpers import make_entry, make_run


def _position(html: str, marker: str) -> int:
    at = html.find(marker)
    assert at >= 0, marker
    return at


def test_verdict_is_first_and_shows_the_actual_values(learner) -> None:
    run_id = make_run(learner)
    make_entry(learner, run_id, prediction="about 4 bits and 20 dB")
    html = learner.get(f"/runs/{run_id}").text
    verdict = _position(html, f'id="run-{run_id}-verdict"')
    outputs = _position(html, f'id="run-{run_id}-outputs"')
    assert verdict < outputs < _position(html, f'id="run-{run_id}-result-h"')
    assert verdict < _position(html, "<summary>Parameters</summary>")
    doc = BeautifulSoup(html, "html.parser")
    actual = doc.select_one(".run-verdict td.actual").get_text(" ", strip=True)
    assert "Bits per value: 4.25 bits" in actual and "Stored bytes: 34,816 bytes" in actual
    assert "succeeded" not in actual


def test_numeric_verdict_and_a_failed_run_say_what_happened(learner) -> None:
    run_id = make_run(learner)
    make_entry(learner, run_id, predicted_value=2000.0, predicted_unit="bytes", metric="nbytes")
    doc = BeautifulSoup(learner.get(f"/runs/{run_id}").text, "html.parser")
    cells = [td.get_text(strip=True) for td in doc.select(".run-verdict td.metric")]
    assert cells == ["2,000", "34,816"]
    assert "Off by more than 10" in doc.select_one(".run-verdict .verdict").text
    failed = make_run(learner, status="failed", result=None, error="Out of memory")
    make_entry(learner, failed, prediction="it fits")
    doc = BeautifulSoup(learner.get(f"/runs/{failed}").text, "html.parser")
    actual = doc.select_one(".run-verdict td.actual").get_text(" ", strip=True)
    assert "Failed: Out of memory" in actual


def test_a_live_run_scrolls_to_the_verdict_when_it_ends(learner) -> None:
    run_id = make_run(learner, status="queued", result=None)
    make_entry(learner, run_id, prediction="4 bits")
    doc = BeautifulSoup(learner.get(f"/runs/{run_id}").text, "html.parser")
    end = doc.select_one("[hx-trigger='sse:end']")
    assert end["hx-swap"] == f"outerHTML show:#run-{run_id}-verdict:top"
    assert "4 bits" in doc.select_one(".run-verdict .prediction-pending").text
    assert not doc.select(".run-verdict .compare-box")  # the verdict once it has ended


def _submit(learner, htmx: bool):  # type: ignore[no-untyped-def]
    data = {
        "_prediction": "fewer bits than nvfp4",
        "_metric": "nbytes",
        "_predicted_value": "about four",
        "format": "int4",
        "csrf_token": learner.headers["X-CSRF-Token"],
    }
    headers = {"HX-Request": "true"} if htmx else {}
    return learner.post("/labs/block-quantize/runs", data=data, headers=headers)


def test_a_non_numeric_prediction_is_kept_marked_and_explained(learner) -> None:
    for htmx in (False, True):
        r = _submit(learner, htmx)
        assert r.status_code == (200 if htmx else 422)
        doc = BeautifulSoup(r.text, "html.parser")
        pv = doc.select_one("#lab-form input[name=_predicted_value]")
        assert pv["value"] == "about four" and pv["aria-invalid"] == "true"
        message = doc.select_one("#" + pv["aria-describedby"])
        assert "number" in message.text and message.find_parent("p") is pv.find_parent("p")
        assert doc.select_one("#lab-form textarea[name=_prediction]").text == (
            "fewer bits than nvfp4"
        )
        chosen = doc.select_one("#lab-form select[name=_metric] option[selected]")
        assert chosen["value"] == "nbytes"
        assert doc.select_one("#lab-form select[name=format] option[selected]")["value"] == "int4"
        assert learner.get("/api/runs/x").status_code == 404
    assert "No runs yet" in learner.get("/labs/block-quantize").text  # nothing started


def test_a_lesson_lab_marks_its_own_bad_prediction(learner) -> None:
    data = {
        "_source": "lesson:one-block-by-hand",
        "_prediction": "two scales",
        "_predicted_value": "lots",
        "csrf_token": learner.headers["X-CSRF-Token"],
    }
    r = learner.post(
        "/labs/block-quantize/runs",
        data=data,
        headers={"HX-Request": "true", "HX-Target": "lab-2-out"},
    )
    assert r.status_code == 200
    doc = BeautifulSoup(r.text, "html.parser")
    assert "The lab did not start" in doc.text
    fieldset = doc.select_one("fieldset#lab-2-predict[hx-swap-oob=true]")
    pv = fieldset.select_one("input#lab-2-pv")
    assert pv["value"] == "lots" and pv["aria-invalid"] == "true"
    assert fieldset.select_one("textarea").text == "two scales"
