"""The exercise pages in process (no worker): catalogue, editor without JavaScript,
drafts, hints, giving up (solution + review cards), refusals. The verdicts themselves
come from the real worker in tests/integration/test_judge_escapes.py."""

from __future__ import annotations

from typing import Any

from bs4 import BeautifulSoup
from sqlalchemy import select

from app.db import ReviewCard, make_engine, make_sessionmaker
from tests.inprocess import InProcess

EX = "q8_0-quantize"


def soup(r: Any) -> BeautifulSoup:
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


def test_catalogue_groups_by_concept_and_lists_every_exercise(inproc: InProcess) -> None:
    c = inproc.learner()
    page = soup(c.get("/exercises"))
    links = {a["href"] for a in page.select("a.nav-item")}
    assert {f"/exercises/{i}" for i in inproc.app.state.exercises} == links
    groups = [h.a["href"] for h in page.select("main section h2")]
    assert groups and all(g.startswith("/terms/") for g in groups)
    api = {e["id"] for e in c.get("/api/exercises").json()}
    assert api == set(inproc.app.state.exercises)


def test_editor_page_is_a_form_that_works_without_javascript(inproc: InProcess) -> None:
    c = inproc.learner()
    ex = inproc.app.state.exercises[EX]
    page = soup(c.get(f"/exercises/{EX}"))
    form = page.find("form", id="exercise-form")
    assert form["method"] == "post" and form["action"] == f"/exercises/{EX}/submissions"
    area = form.find("textarea", attrs={"name": "code"})
    assert area.text == ex.starter and page.find("label", attrs={"for": area["id"]})
    modes = [b["value"] for b in form.find_all("button", attrs={"name": "mode"})]
    assert modes == ["examples", "submit"]
    assert page.find(id="solution").find("pre") is None  # not before a pass or giving up
    token = c.cookies["lowbit_csrf"]
    code = ex.starter + "\n# my attempt\n"
    r = c.post(
        f"/exercises/{EX}/submissions", data={"code": code, "mode": "examples", "csrf_token": token}
    )
    assert r.status_code == 303 and r.headers["location"].startswith("/submissions/")
    result = soup(c.get(r.headers["location"]))
    assert "Waiting for a worker" in result.find(class_="verdict").text  # no worker here
    assert result.find("noscript").find("meta")["http-equiv"] == "refresh"
    # The draft is the learner's, on the server: the editor comes back with it.
    again = soup(c.get(f"/exercises/{EX}"))
    assert again.find("textarea", attrs={"name": "code"}).text == code
    assert len(again.select("ol.attempts li")) == 1
    assert inproc.learner().get(r.headers["location"]).status_code == 404  # not theirs


def test_drafts_save_and_refuse_oversized_code(inproc: InProcess) -> None:
    c = inproc.learner()
    token = c.cookies["lowbit_csrf"]
    assert (
        c.post(f"/exercises/{EX}/draft", data={"code": "x = 1\n", "csrf_token": token}).status_code
        == 204
    )
    assert soup(c.get(f"/exercises/{EX}")).find("textarea").text == "x = 1\n"
    big = "#" * (64 * 1024 + 1)
    r = c.post(
        f"/exercises/{EX}/submissions", data={"code": big, "mode": "submit", "csrf_token": token}
    )
    assert (
        r.status_code == 422
        and "64 KiB" in BeautifulSoup(r.text, "html.parser").find(role="alert").text
    )
    r = c.post(
        f"/exercises/{EX}/submissions", data={"code": "x", "mode": "grade", "csrf_token": token}
    )
    assert r.status_code == 422


def test_hints_unlock_one_at_a_time(inproc: InProcess) -> None:
    c = inproc.learner()
    token = c.cookies["lowbit_csrf"]
    hints = inproc.app.state.exercises[EX].hints
    assert soup(c.get(f"/exercises/{EX}")).find(id="hints").find("ol") is None
    for n in range(1, len(hints) + 1):
        assert c.post(f"/exercises/{EX}/hints", data={"csrf_token": token}).status_code == 303
        shown = [li.text for li in soup(c.get(f"/exercises/{EX}")).find(id="hints").select("ol li")]
        assert shown == list(hints[:n])
    assert "every hint" in soup(c.get(f"/exercises/{EX}")).find(id="hints").text


def test_giving_up_shows_the_solution_and_queues_the_concepts_for_review(inproc: InProcess) -> None:
    c = inproc.learner()
    token = c.cookies["lowbit_csrf"]
    ex = inproc.app.state.exercises[EX]
    assert c.post(f"/exercises/{EX}/give-up", data={"csrf_token": token}).status_code == 303
    shown = soup(c.get(f"/exercises/{EX}")).find(id="solution").find("pre").text
    assert shown == ex.solution
    engine = make_engine(inproc.settings.db_url)
    try:
        with make_sessionmaker(engine)() as s:
            refs = set(s.scalars(select(ReviewCard.ref).where(ReviewCard.kind == "quiz")))
    finally:
        engine.dispose()
    assert any(r.startswith(f"term:{ex.concepts[0]}/") for r in refs)


def test_cards_link_the_exercises_that_practise_them(inproc: InProcess) -> None:
    c = inproc.learner()
    for ex in inproc.app.state.exercises.values():
        for slug in ex.concepts:
            page = soup(c.get(f"/terms/{slug}"))
            section = page.find("section", class_="practice")
            assert section is not None, slug
            assert f"/exercises/{ex.id}" in {a["href"] for a in section.find_all("a")}
        page = soup(c.get(f"/exercises/{ex.id}"))
        assert {f"/terms/{s}" for s in ex.concepts} <= {a["href"] for a in page.find_all("a")}


def test_a_model_proof_is_shown_beside_the_reference(inproc: InProcess) -> None:
    from sqlalchemy import update

    from app.db import Run, Submission

    c = inproc.learner()
    sid = c.post(f"/api/exercises/{EX}/submissions", json={"code": "x", "mode": "submit"}).json()[
        "id"
    ]
    scores = {
        "perplexity": 9.5,
        "perplexity_delta": 0.01,
        "kl_divergence": 0.000123,
        "top1_agreement": 0.987,
    }
    proof = {
        "format": "q8_0",
        "tensors": 28,
        "identical_tensors": 28,
        "learner": scores,
        "reference": scores,
        "eval_tokens": 2048,
        "context": 128,
        "seconds": 3.0,
    }
    engine = make_engine(inproc.settings.db_url)
    try:
        with make_sessionmaker(engine)() as s:
            s.execute(
                update(Run)
                .where(Run.id == sid)
                .values(status="succeeded", result={"model_proof": proof})
            )
            s.execute(update(Submission).where(Submission.id == sid).values(verdict="passed"))
            s.commit()
    finally:
        engine.dispose()
    assert c.get(f"/api/submissions/{sid}").json()["model_proof"] == proof
    table = soup(c.get(f"/submissions/{sid}")).find("table", class_="proof")
    rows = [[td.text for td in tr.find_all("td")] for tr in table.tbody.find_all("tr")]
    assert rows == [["0.000123", "98.70 %", "9.500"]] * 2


def test_the_run_page_of_a_submission_leads_to_its_result(inproc: InProcess) -> None:
    c = inproc.learner()
    sid = c.post(f"/api/exercises/{EX}/submissions", json={"code": "x"}).json()["id"]
    r = c.get(f"/runs/{sid}")
    assert r.status_code == 303 and r.headers["location"] == f"/submissions/{sid}"
    assert sid not in c.get("/runs").text  # the lab run history lists lab runs only


def test_a_waiting_submission_has_a_stop_button_that_works_without_javascript(
    inproc: InProcess,
) -> None:
    c = inproc.learner()
    sid = c.post(f"/api/exercises/{EX}/submissions", json={"code": "x"}).json()["id"]
    form = soup(c.get(f"/submissions/{sid}")).find("form", action=f"/runs/{sid}/cancel")
    assert form["method"] == "post" and form.find("button").text == "Stop"
    fields = {i["name"]: i["value"] for i in form.find_all("input")}
    r = c.post(form["action"], data=fields)
    assert r.status_code == 303 and r.headers["location"] == f"/submissions/{sid}"
    page = soup(c.get(r.headers["location"]))
    assert "Cancelled" in page.find(class_="verdict").text
    assert page.find("form", action=f"/runs/{sid}/cancel") is None
    assert c.get(f"/api/submissions/{sid}").json()["status"] == "cancelled"


def test_a_missed_submit_sends_its_concepts_to_review_through_the_api_too(
    inproc: InProcess,
) -> None:
    """Review cards from a failed Submit were made only when the result page was viewed
    (and that code was never called): an API-only learner got none."""
    from sqlalchemy import update

    from app.db import Run, Submission

    c = inproc.learner()
    ex = inproc.app.state.exercises[EX]
    sid = c.post(f"/api/exercises/{EX}/submissions", json={"code": "x", "mode": "submit"}).json()[
        "id"
    ]
    engine = make_engine(inproc.settings.db_url)
    try:
        factory = make_sessionmaker(engine)

        with factory() as s:
            learner = s.scalar(select(Submission.learner_id).where(Submission.id == sid))

        def refs() -> set[str]:  # this learner's review cards
            with factory() as s:
                q = select(ReviewCard.ref).where(
                    ReviewCard.kind == "quiz", ReviewCard.learner_id == learner
                )
                return set(s.scalars(q))

        assert c.get(f"/api/submissions/{sid}").json()["status"] == "queued"
        assert not any(r.startswith(f"term:{ex.concepts[0]}/") for r in refs())
        with factory() as s:  # as the worker ends it: the hidden cases failed
            s.execute(update(Run).where(Run.id == sid).values(status="succeeded"))
            s.execute(update(Submission).where(Submission.id == sid).values(verdict="failed"))
            s.commit()
        assert c.get(f"/api/submissions/{sid}").json()["status"] == "failed"
        assert any(r.startswith(f"term:{ex.concepts[0]}/") for r in refs())
    finally:
        engine.dispose()
    page = soup(c.get(f"/submissions/{sid}"))
    assert "review queue" in page.get_text(" ")
