"""Quick checks in place, FSRS review through the service, accounts that claim
anonymous progress, CSRF, and bad input that never 500s."""

from __future__ import annotations

from datetime import timedelta

from bs4 import BeautifulSoup
from sqlalchemy import select

from app import review
from app.db import QuizAttempt, ReviewCard, utcnow
from tests.conftest import csrf_headers


def _item(client, slug: str, kind: str):  # type: ignore[no-untyped-def]
    cat = client.app.state.content.get()
    return next(q for q in cat.terms[slug].front.quiz if q.type == kind)


def _session(client):  # type: ignore[no-untyped-def]
    return client.app.state.sessionmaker()


def test_answer_in_place_and_it_becomes_a_review_card(client) -> None:
    h = csrf_headers(client)
    q = _item(client, "quantization", "single")
    r = client.post(
        f"/quiz/term:quantization/{q.id}",
        data={"answer": str(q.answer)},
        headers={**h, "HX-Request": "true"},
    )
    assert r.status_code == 200
    frag = BeautifulSoup(r.text, "html.parser")
    assert frag.find("html") is None
    assert "correct" in frag.select_one(".feedback")["class"]
    assert q.explanation in r.text
    with _session(client) as s:
        cards = s.scalars(select(ReviewCard)).all()
        assert [c.ref for c in cards] == [f"term:quantization/{q.id}"]
        assert cards[0].due > utcnow()  # a correct first answer schedules it later


def test_plain_form_post_without_js(client) -> None:
    h = csrf_headers(client)
    q = _item(client, "fp8", "single")
    wrong = (q.answer + 1) % len(q.choices)
    r = client.post(
        f"/quiz/term:fp8/{q.id}", data={"answer": str(wrong), "csrf_token": h["X-CSRF-Token"]}
    )
    assert r.status_code == 200 and "<html" in r.text and "Not quite" in r.text


def test_double_submission_is_counted_once(client) -> None:
    h = csrf_headers(client)
    q = _item(client, "vram", "single")
    for _ in range(3):
        client.post(f"/quiz/term:vram/{q.id}", data={"answer": str(q.answer)}, headers=h)
    with _session(client) as s:
        assert len(s.scalars(select(QuizAttempt)).all()) == 1


def test_unknown_item_and_bad_answers(client) -> None:
    h = csrf_headers(client)
    assert (
        client.post("/quiz/term:fp8/no-such-item", data={"answer": "1"}, headers=h).status_code
        == 404
    )
    assert client.post("/quiz/term:nope/x", data={"answer": "1"}, headers=h).status_code == 404
    assert client.post("/quiz/bogus/x", data={"answer": "1"}, headers=h).status_code == 404
    q = _item(client, "vram", "numeric")
    for bad in ["12 parsecs", "x" * 5000, "1e999", ""]:
        r = client.post(f"/quiz/term:vram/{q.id}", data={"answer": bad}, headers=h)
        assert r.status_code == 422 and "errors" in r.text


def test_fsrs_due_dates_move_with_ratings(client) -> None:
    with _session(client) as s:
        from app.deps import ensure_learner

        ensure_learner(s, "l" * 32)
        now = utcnow()
        card = review.get_or_create(s, "l" * 32, "quiz", "term:fp8/x", now)
        review.rate(s, card, 3, now)  # Good
        first = card.due
        assert first > now
        review.rate(s, card, 3, first)
        second = card.due
        assert second - first > first - now  # intervals grow after successive Good
        review.rate(s, card, 1, second)  # Again
        assert card.due - second < timedelta(hours=1) and card.lapses == 1
        s.commit()


def test_review_page_serves_due_card_and_rating_moves_it(client) -> None:
    h = csrf_headers(client)
    q = _item(client, "scale-factor", "single")
    wrong = (q.answer + 1) % len(q.choices)
    client.post(f"/quiz/term:scale-factor/{q.id}", data={"answer": str(wrong)}, headers=h)
    with _session(client) as s:  # make it due now
        card = s.scalars(select(ReviewCard)).one()
        card.due = utcnow() - timedelta(minutes=1)
        s.commit()
        cid = card.id
    page = BeautifulSoup(client.get("/review").text, "html.parser")
    assert page.select_one(f"form[action='/review/{cid}/answer']")
    assert q.explanation not in str(page)
    r = client.post(f"/review/{cid}/answer", data={"answer": str(q.answer)}, headers=h)
    assert "data-rating-key" in r.text
    r = client.post(f"/review/{cid}/rate", data={"rating": "3"}, headers=h, follow_redirects=False)
    assert r.status_code == 303
    with _session(client) as s:
        assert s.get(ReviewCard, cid).due > utcnow()
    assert client.post(f"/review/{cid}/rate", data={"rating": "9"}, headers=h).status_code == 422


def test_signup_keeps_and_signin_claims_anonymous_progress(client) -> None:
    h = csrf_headers(client)
    q = _item(client, "fp8", "single")
    client.post(f"/quiz/term:fp8/{q.id}", data={"answer": str(q.answer)}, headers=h)
    r = client.post(
        "/signup",
        data={"username": "ada", "password": "a long passphrase", "password2": "a long passphrase"},
        headers=h,
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert "ada" in client.get("/progress").text
    client.post("/signout", headers=h)
    client.cookies.delete("lowbit_session")
    # a new anonymous learner answers something, then signs in: it is claimed
    h = csrf_headers(client)
    q2 = _item(client, "vram", "single")
    client.post(f"/quiz/term:vram/{q2.id}", data={"answer": str(q2.answer)}, headers=h)
    r = client.post(
        "/signin",
        data={"username": "ada", "password": "a long passphrase"},
        headers=h,
        follow_redirects=False,
    )
    assert r.status_code == 303
    with _session(client) as s:
        from app.db import Learner

        ada = s.scalar(select(Learner).where(Learner.username == "ada"))
        refs = {c.ref for c in s.scalars(select(ReviewCard).where(ReviewCard.learner_id == ada.id))}
        assert refs == {f"term:fp8/{q.id}", f"term:vram/{q2.id}"}


def test_password_change_and_wrong_password(client) -> None:
    h = csrf_headers(client)
    client.post(
        "/signup",
        data={"username": "bob", "password": "first password", "password2": "first password"},
        headers=h,
    )
    r = client.post(
        "/account/password",
        data={"old": "nope nope nope", "new": "second password", "new2": "second password"},
        headers=h,
    )
    assert r.status_code == 422
    r = client.post(
        "/account/password",
        data={"old": "first password", "new": "second password", "new2": "second password"},
        headers=h,
    )
    assert "Password changed" in r.text
    client.post("/signout", headers=h)
    assert (
        client.post(
            "/signin", data={"username": "bob", "password": "first password"}, headers=h
        ).status_code
        == 422
    )
    assert (
        client.post(
            "/signin",
            data={"username": "bob", "password": "second password"},
            headers=h,
            follow_redirects=False,
        ).status_code
        == 303
    )


def test_signin_is_rate_limited(client) -> None:
    h = csrf_headers(client)
    codes = [
        client.post("/signin", data={"username": "eve", "password": "guess"}, headers=h).status_code
        for _ in range(12)
    ]
    assert codes[0] == 422 and codes[-1] == 429


def test_signup_rejects_bad_input_and_escapes_it(client) -> None:
    h = csrf_headers(client)
    r = client.post(
        "/signup",
        data={
            "username": "<script>x</script>",
            "password": "a long passphrase",
            "password2": "a long passphrase",
        },
        headers=h,
    )
    assert (
        r.status_code == 422 and "<script>x</script>" not in r.text and "&lt;script&gt;" in r.text
    )


def test_session_cookie_flags(client) -> None:
    r = client.get("/")
    cookies = r.headers.get_list("set-cookie")
    session = next(c for c in cookies if c.startswith("lowbit_session="))
    assert "HttpOnly" in session and "SameSite=Lax" in session
    csrf = next(c for c in cookies if c.startswith("lowbit_csrf="))
    assert "HttpOnly" not in csrf  # htmx must read it? no: it is in the page; still Lax
    assert "SameSite=Lax" in csrf


def test_admin_is_only_for_admins(client) -> None:
    h = csrf_headers(client)
    assert client.get("/admin").status_code == 404
    with _session(client) as s:
        from app.accounts import create_account

        create_account(s, "root1", "admin password", admin=True)
    client.post("/signin", data={"username": "root1", "password": "admin password"}, headers=h)
    page = client.get("/admin")
    assert page.status_code == 200 and "Workers" in page.text


def _run_with_prediction(client, learner: str, predicted: float, actual: float):  # type: ignore[no-untyped-def]
    from app.db import NotebookEntry, Run
    from app.deps import ensure_learner

    with _session(client) as s:
        ensure_learner(s, learner)
        run = Run(
            learner_id=learner,
            lab_id="memory-budget",
            status="succeeded",
            params={"model": "llama-3.1-70b"},
            result={"weights_gb": actual, "finding": "It does not fit on one H100."},
            environment={"host": "w1", "device": "cpu"},
            sandbox={"network": {"enabled": True, "detail": "netns"}},
        )
        s.add(run)
        s.commit()
        entry = NotebookEntry(
            learner_id=learner,
            source="lab:memory-budget",
            lab_id="memory-budget",
            run_id=run.id,
            prediction="<b>about</b> 141 GB",
            predicted_value=predicted,
            predicted_unit="GB",
            metric="weights_gb",
            next_step="check nvidia-smi",
        )
        s.add(entry)
        s.commit()
        return run.id, entry.id


def test_wrong_prediction_comes_back_in_review(client) -> None:
    h = csrf_headers(client)
    from app.middleware import session_serializer

    learner = session_serializer(client.app.state.settings).loads(client.cookies["lowbit_session"])[
        "l"
    ]
    run_id, entry_id = _run_with_prediction(client, learner, predicted=70.0, actual=141.1)
    page = client.get(f"/runs/{run_id}")
    assert "Off by more than 10" in page.text
    with _session(client) as s:
        card = s.scalars(select(ReviewCard).where(ReviewCard.kind == "prediction")).one()
        card.due = utcnow() - timedelta(minutes=1)
        s.commit()
        cid = card.id
    review_page = client.get("/review").text
    assert "memory-budget" in review_page and "You predicted 70" in review_page
    r = client.post(f"/review/{cid}/answer", data={"answer": "141 GB"}, headers=h)
    assert "Correct" in r.text and "data-rating-key" in r.text
    report = client.get(f"/runs/{run_id}/report.md")
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/markdown")
    assert (
        "## Prediction" in report.text
        and "weights_gb" in report.text
        and "check nvidia-smi" in report.text
    )


def test_notebook_and_reports_are_private(client) -> None:
    from app.middleware import session_serializer

    csrf_headers(client)
    owner = session_serializer(client.app.state.settings).loads(client.cookies["lowbit_session"])[
        "l"
    ]
    run_id, entry_id = _run_with_prediction(client, owner, predicted=141.0, actual=141.1)
    assert "&lt;b&gt;about&lt;/b&gt;" in client.get("/notebook").text
    md = client.get("/notebook/export.md").text
    assert "memory-budget" in md and "check nvidia-smi" in md
    client.cookies.clear()  # another learner
    h = csrf_headers(client)
    assert client.get(f"/runs/{run_id}/report.md").status_code == 404
    assert client.get(f"/runs/{run_id}").status_code == 404
    assert (
        client.post(f"/notebook/{entry_id}/reflect", data={"next_step": "x"}, headers=h).status_code
        == 404
    )
    assert "memory-budget" not in client.get("/notebook").text
    assert "memory-budget" not in client.get("/notebook/export.md").text


def test_a_non_number_in_place_keeps_one_question_and_clears_on_the_next_answer(client) -> None:
    """Issue 20.8: "abc" put a second copy of the question inside the card (the feedback
    block around a new form), kept the red message after a correct answer, and answered
    422, which the browser logs. Now the form comes back as itself, marked."""
    h = {**csrf_headers(client), "HX-Request": "true"}
    q = _item(client, "vram", "numeric")
    r = client.post(f"/quiz/term:vram/{q.id}", data={"answer": "abc"}, headers=h)
    assert r.status_code == 200
    doc = BeautifulSoup(r.text, "html.parser")
    forms = doc.select("form.quiz-item")
    assert len(forms) == 1 and forms[0]["id"] == f"q-term-vram-{q.id}"
    assert len(doc.select("legend")) == 1 and not doc.select(".prompt, .feedback")
    box = doc.select_one("input[name=answer]")
    assert box["value"] == "abc" and box["aria-invalid"] == "true"
    assert "Type a number" in doc.select_one(f"#q-term-vram-{q.id}-e").text
    r = client.post(f"/quiz/term:vram/{q.id}", data={"answer": str(q.answer)}, headers=h)
    doc = BeautifulSoup(r.text, "html.parser")
    assert doc.select_one(".verdict.correct") is not None
    assert not doc.select(".errors") and not doc.select("form.quiz-item")
