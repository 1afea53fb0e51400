"""Defect 5 (issue 14): no raw Markdown, LaTeX, Python reprs or doubled words reach
the learner: search snippets, quiz explanations, result cells, review prompts,
notebook exports and lesson lab boxes."""

from __future__ import annotations

from datetime import timedelta

from bs4 import BeautifulSoup

from app.runs.views import format_params, format_value
from tests.unit.app.flows.helpers import make_entry, make_run

# Words that meet links, formulas and code in many cards.
QUERIES = ("scale", "error", "block", "int4", "memory", "bits", "kv cache", "clipping")


def test_search_snippets_show_text_not_markup(learner) -> None:
    seen = 0
    for q in QUERIES:
        doc = BeautifulSoup(learner.get("/search", params={"q": q}).text, "html.parser")
        for p in doc.select("p.snippet"):
            text = p.get_text()
            assert "](" not in text and "`" not in text and "$" not in text, (q, text)
            assert "\\frac" not in text and "\\times" not in text, (q, text)
            seen += 1
    assert seen > 20


def test_plain_text_keeps_the_words() -> None:
    from app.search import plain_text

    md = "See [the scale](/terms/scale-factor), `torch.clamp` and $\\Delta^2/12 \\approx 8.3$; *biased*."
    assert plain_text(md) == "See the scale, torch.clamp and Δ^2/12 ≈ 8.3; biased."


def test_quiz_explanation_is_inline_markdown(learner) -> None:
    cat = learner.app.state.content.get()
    quiz = cat.terms["quantization-error"].front.quiz
    item = next(q for q in quiz if "*biased*" in q.explanation)
    r = learner.post(
        f"/quiz/term:quantization-error/{item.id}",
        data={"answer": str(item.answer)},
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 200
    assert "<em>biased</em>" in r.text and "*biased*" not in r.text


def test_result_cells_read_as_values() -> None:
    assert format_value([1.5, 2, 3]) == "1.5, 2, 3"
    assert format_value([]) == "none"
    long = format_value("quantization " * 40)
    assert long.endswith("quantization…") and len(long) <= 200
    assert format_params({"format": "int4", "values": None, "shape": [4, 4]}) == (
        "format int4 · shape 4, 4"
    )


def test_review_prompt_and_export_omit_unset_parameters(learner) -> None:
    from sqlalchemy import select

    from app.db import ReviewCard, utcnow

    run_id = make_run(learner)
    make_entry(
        learner,
        run_id,
        prediction="4 bits",
        predicted_value=8.0,
        predicted_unit="bits",
        metric="bits_per_value",
    )
    assert "Off by more than 10" in learner.get(f"/runs/{run_id}").text  # graded: a card
    with learner.app.state.sessionmaker() as s:
        for card in s.scalars(select(ReviewCard).where(ReviewCard.kind == "prediction")):
            card.due = utcnow() - timedelta(minutes=1)
        s.commit()
    review = learner.get("/review").text
    assert "format int4 · shape 256, 256 · seed 0" in review
    export = learner.get("/notebook/export.md").text
    assert "`format=int4`, `shape=[256, 256]`, `seed=0`" in export
    for text in (review, export, learner.get(f"/runs/{run_id}/report.md").text):
        assert "None" not in text and "values=" not in text


def test_lesson_lab_boxes_say_before_you_run_once(learner) -> None:
    cat = learner.app.state.content.get()
    prompts = 0
    for lesson in cat.sorted_lessons():
        doc = BeautifulSoup(learner.get(f"/lessons/{lesson.slug}").text, "html.parser")
        for p in doc.select(".predict-prompt"):
            text = p.get_text(" ", strip=True)
            assert not text.lower().startswith("before you run: before you run"), text
            assert "`" not in text, text
            prompts += 1
    assert prompts > 5


def test_term_index_definitions_render_their_code(learner) -> None:
    doc = BeautifulSoup(learner.get("/terms").text, "html.parser")
    defs = doc.select("span.def")
    assert len(defs) > 100
    assert not [d.text for d in defs if "`" in d.text]
    assert any(d.select("code") for d in defs)
