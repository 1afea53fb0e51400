"""Defect 8 (issue 14): progress shows where the learner browses: done marks on the
lesson and term indexes, an answered quick check says so on reload, and review's
"Coming up" counts cards that come back later today."""

from __future__ import annotations

from datetime import timedelta

from bs4 import BeautifulSoup

HX = {"HX-Request": "true"}


def _seen(learner, kind: str, slug: str) -> None:  # type: ignore[no-untyped-def]
    r = learner.post("/progress/seen", data={"kind": kind, "slug": slug}, headers=HX)
    assert r.status_code in (200, 204)


def test_indexes_mark_what_was_read_and_done(learner) -> None:
    cat = learner.app.state.content.get()
    first, second = cat.sorted_lessons()[:2]
    term = cat.sorted_terms()[0]
    _seen(learner, "lesson-done", first.slug)
    _seen(learner, "lesson", second.slug)
    _seen(learner, "term", term.slug)
    lessons = BeautifulSoup(learner.get("/lessons").text, "html.parser")
    marks = {
        li.select_one("a")["href"]: li.select_one(".done-mark").text
        for li in lessons.select(".lesson-list li")
        if li.select_one(".done-mark")
    }
    assert marks == {f"/lessons/{first.slug}": "✓ done", f"/lessons/{second.slug}": "started"}
    terms = BeautifulSoup(learner.get("/terms").text, "html.parser")
    read = [li.select_one("a")["href"] for li in terms.select("li.done")]
    assert read == [f"/terms/{term.slug}"]
    page = learner.get(f"/lessons/{first.slug}").text
    assert "You marked this lesson complete" in page


def test_an_answered_quick_check_shows_its_answer_on_reload(learner) -> None:
    cat = learner.app.state.content.get()
    item = next(q for q in cat.terms["quantization"].front.quiz if q.type == "single")
    owner = "term:quantization"
    form_id = f"q-term-quantization-{item.id}"
    before = BeautifulSoup(learner.get("/terms/quantization").text, "html.parser")
    assert before.select_one(f"#{form_id} .quiz-answered") is None
    wrong = next(i for i in range(len(item.choices)) if i != item.answer)
    learner.post(f"/quiz/{owner}/{item.id}", data={"answer": str(wrong)}, headers=HX)
    after = BeautifulSoup(learner.get("/terms/quantization").text, "html.parser")
    note = after.select_one(f"#{form_id} .quiz-answered")
    assert note is not None and "incorrect" in note["class"]
    assert item.choices[wrong] in note.text and item.choices[item.answer] in note.text
    other = BeautifulSoup(learner.get("/terms/sqnr").text, "html.parser")
    assert other.select_one(".quiz-answered") is None  # only where it was answered
    lesson = next(x for x in cat.sorted_lessons() if any(q.type == "single" for q in x.front.quiz))
    q = next(q for q in lesson.front.quiz if q.type == "single")
    learner.post(f"/quiz/lesson:{lesson.slug}/{q.id}", data={"answer": str(q.answer)}, headers=HX)
    doc = BeautifulSoup(learner.get(f"/lessons/{lesson.slug}").text, "html.parser")
    note = doc.select_one(f"#q-lesson-{lesson.slug}-{q.id} .quiz-answered")
    assert note is not None and "correct" in note["class"]


def test_coming_up_counts_cards_due_later_today(learner) -> None:
    from sqlalchemy import select

    from app.db import ReviewCard, utcnow
    from tests.unit.app.flows.helpers import learner_id

    cat = learner.app.state.content.get()
    item = next(q for q in cat.terms["quantization"].front.quiz if q.type == "single")
    owner = "term:quantization"
    learner.post(f"/quiz/{owner}/{item.id}", data={"answer": str(item.answer)}, headers=HX)
    now = utcnow()
    end_of_day = now.replace(hour=23, minute=59, second=59, microsecond=0)
    with learner.app.state.sessionmaker() as s:
        card = s.scalars(
            select(ReviewCard).where(ReviewCard.learner_id == learner_id(learner))
        ).one()
        card.due = min(now + timedelta(seconds=30), end_of_day)
        s.commit()
    doc = BeautifulSoup(learner.get("/review").text, "html.parser")
    rows = {tr.select("td")[0].text: tr.select("td")[1].text for tr in doc.select("tbody tr")}
    assert rows["Later today"] == "1"
