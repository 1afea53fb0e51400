"""Issue 20, item 10, for every lab with a prediction: through the real server and
worker, a wrong numeric prediction comes back in review as a question about the idea,
built from the run's own numbers (not "what does the lab report?"), and answering it
grades the choice the run's result makes right."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from bs4 import BeautifulSoup
from sqlalchemy import select

from app.db import NotebookEntry, ReviewCard, utcnow
from labs.registry import get_lab
from labs.viz.tiles import readable
from tests.integration.conftest import Stack, wait_final

# lab -> (form params, the number predicted, a value far from what the run reports)
CASES: dict[str, tuple[dict[str, str], str, str]] = {
    "block-quantize": (
        {"format": "nvfp4", "shape": "64,64", "distribution": "normal", "seed": "0"},
        "bits_per_value",
        "40",
    ),
    "scale-derivation": ({}, "scale", "900"),
    "granularity-compare": ({"shape": "64,64"}, "sqnr_db_tensor", "300"),
    "dot-product-scales": ({}, "rel_error_b", "90 %"),
    "memory-budget": ({}, "weights_gb", "1"),
    "qlora-budget": ({}, "total_gb", "900"),
    "kv-capacity": ({}, "total_blocks", "3"),
    "fp8-savings": ({}, "speedup_same_batch", "40"),
    "format-support": ({"format": "fp8", "gpu": "t4"}, "resident_bits_per_param", "2"),
    "shard-doctor": ({"fault": "missing-shard"}, "errors", "40"),
}


def _post(c: httpx.Client, lab: str, data: dict[str, str]) -> str:
    r = c.post(f"/labs/{lab}/runs", data={**data, "csrf_token": c.cookies["lowbit_csrf"]})
    main = BeautifulSoup(r.text, "html.parser").select_one("main")
    assert r.status_code == 303, " ".join(
        (main or BeautifulSoup("", "html.parser")).get_text(" ").split()
    )[:1500]
    return r.headers["location"].rsplit("/", 1)[-1]


def _due_now(live: Stack, run_id: str) -> str:
    """The review card of the prediction on ``run_id``, made due now (FSRS sets "again"
    cards a few minutes ahead); returns its id."""
    with live.factory() as s:
        entry = s.scalars(select(NotebookEntry).where(NotebookEntry.run_id == run_id)).one()
        assert entry.prediction_correct is False
        card = s.scalars(
            select(ReviewCard).where(ReviewCard.kind == "prediction", ReviewCard.ref == entry.id)
        ).one()
        card.due = utcnow() - timedelta(minutes=1)
        s.commit()
        return str(card.id)


@pytest.mark.parametrize("lab_id", list(CASES))
def test_a_wrong_prediction_comes_back_as_a_concept_from_the_run(live: Stack, lab_id: str) -> None:
    params, metric, wrong = CASES[lab_id]
    lab = get_lab(lab_id)
    assert lab is not None and lab.concept is not None
    c = live.learner()
    run_id = _post(c, lab_id, {**params, "_metric": metric, "_predicted_value": wrong})
    body = wait_final(c, run_id)
    assert body["status"] == "succeeded", body.get("error")
    c.get(f"/runs/{run_id}")  # the run page settles the prediction: wrong, so a card
    card_id = _due_now(live, run_id)
    concept = lab.concept(body["result"], metric)
    assert concept is not None and len(concept.choices) == 3  # noqa: PLR2004

    page = BeautifulSoup(c.get("/review").text, "html.parser")
    review = page.select_one("#review")
    assert review is not None
    text = " ".join(review.get_text(" ").split())
    assert " ".join(concept.prompt.split()) in text
    assert "You predicted" not in text and "what does it report" not in text.lower()
    radios = review.select("input[type=radio][name=answer]")
    assert [r["value"] for r in radios] == ["0", "1", "2"]  # a choice, not a number
    labels = [" ".join(r.parent.get_text(" ").split()) for r in radios]
    assert labels == [" ".join(x.split()) for x in concept.choices]

    wrong_choice = (concept.answer + 1) % 3
    h = {"X-CSRF-Token": c.cookies["lowbit_csrf"]}
    r = c.post(f"/review/{card_id}/answer", data={"answer": str(wrong_choice)}, headers=h)
    assert r.status_code == 200
    assert BeautifulSoup(r.text, "html.parser").select_one(".verdict.incorrect") is not None
    r = c.post(f"/review/{card_id}/answer", data={"answer": str(concept.answer)}, headers=h)
    feedback = BeautifulSoup(r.text, "html.parser")
    assert r.status_code == 200 and feedback.select_one(".verdict.correct") is not None
    explanation = " ".join(feedback.select_one(".explanation").get_text(" ").split())
    assert "Your run" in explanation or "your run" in explanation
    r = c.post(f"/review/{card_id}/rate", data={"rating": "3"}, headers=h)
    assert r.status_code == 303
    with live.factory() as s:
        card = s.get(ReviewCard, card_id)
        assert card is not None and card.reps == 2 and card.due > utcnow()  # noqa: PLR2004


def test_the_question_quotes_the_runs_numbers(live: Stack) -> None:
    """The block-quantize question names the run's own bits per value and SQNR."""
    c = live.learner()
    params, metric, wrong = CASES["block-quantize"]
    run_id = _post(c, "block-quantize", {**params, "_metric": metric, "_predicted_value": wrong})
    result: dict[str, Any] = wait_final(c, run_id)["result"]
    c.get(f"/runs/{run_id}")
    _due_now(live, run_id)
    text = " ".join(BeautifulSoup(c.get("/review").text, "html.parser").get_text(" ").split())
    assert f"{readable(result['bits_per_value'], 4)} bits per value" in text
    assert f"SQNR {readable(result['metrics']['sqnr_db'])} dB" in text
    assert "64×64" in text and "nvfp4" in text
