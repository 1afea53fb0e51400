"""Every text field's limit holds on the server, says itself and cuts nothing
(issue 24, item 4): a client that bypasses the form's ``maxlength`` posts more, and
gets a 422 that names the limit, with the form back holding what was typed. Each
limit is read from the ``maxlength`` of the form the server sends back, so the
form and the server cannot disagree unnoticed."""

from __future__ import annotations

import re

import httpx
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from app.db import Learner, NotebookEntry, Run
from tests.integration.conftest import Stack, wait_final

SMALL = {"format": "int8", "shape": "16,16", "distribution": "normal", "seed": "1"}


def _said_limit(soup: BeautifulSoup, limit: int, typed: int) -> None:
    text = " ".join(soup.get_text(" ").split())
    assert re.search(rf"at most {limit:,} characters; this one has {typed:,}", text), text[:2000]


def _form(c: httpx.Client, path: str, data: dict[str, str]) -> tuple[int, BeautifulSoup]:
    r = c.post(path, data={**data, "csrf_token": c.cookies["lowbit_csrf"]})
    return r.status_code, BeautifulSoup(r.text, "html.parser")


def test_a_long_username_is_refused_with_its_limit_and_kept_in_the_form(live: Stack) -> None:
    c = live.learner()
    name = "a" * 500  # longer than any cut the server ever made (40, 300)
    status, soup = _form(
        c, "/signup", {"username": name, "password": "p" * 12, "password2": "p" * 12}
    )
    assert status == 422
    field = soup.select_one("input#username")
    assert field is not None and field["value"] == name
    _said_limit(soup, int(field["maxlength"]), len(name))
    with live.factory() as s:
        assert s.scalar(select(func.count()).where(Learner.username.like("aaa%"))) == 0


def test_a_password_longer_than_any_account_has_never_signs_in(live: Stack) -> None:
    """Sign-in cut the password to 256 characters: the account's password with
    anything appended opened it."""
    c = live.learner()
    name, password = f"long{live.name}", "s" * 256
    status, _ = _form(c, "/signup", {"username": name, "password": password, "password2": password})
    assert status == 303
    other = live.learner()
    status, soup = _form(other, "/signin", {"username": name, "password": password + "x"})
    assert status == 422
    field = soup.select_one("input#password")
    assert field is not None
    _said_limit(soup, int(field["maxlength"]), 257)
    assert other.get("/account").status_code == 303  # still signed out


def _runs_of(live: Stack, c: httpx.Client) -> int:
    c.get("/progress")  # a learner row exists once it has done anything
    with live.factory() as s:
        return int(s.scalar(select(func.count()).select_from(Run)) or 0)


def test_a_long_prediction_starts_no_run_and_comes_back_whole(live: Stack) -> None:
    c = live.learner()
    before = _runs_of(live, c)
    prediction = "p" * 2001
    status, soup = _form(c, "/labs/block-quantize/runs", {**SMALL, "_prediction": prediction})
    assert status == 422
    field = soup.select_one("textarea[name=_prediction]")
    assert field is not None and field.get_text() == prediction
    _said_limit(soup, int(field["maxlength"]), len(prediction))
    assert _runs_of(live, c) == before


def test_a_long_reflection_is_refused_and_the_saved_one_is_unchanged(live: Stack) -> None:
    c = live.learner()
    r = c.post(
        "/labs/block-quantize/runs",
        data={**SMALL, "_prediction": "small error", "csrf_token": c.cookies["lowbit_csrf"]},
    )
    assert r.status_code == 303, r.text[:500]
    run_id = r.headers["location"].rsplit("/", 1)[1]
    assert wait_final(c, run_id)["status"] == "succeeded"
    page = BeautifulSoup(c.get("/notebook").text, "html.parser")
    form = page.select_one("form.reflect")
    assert form is not None
    step = "n" * 2001
    status, soup = _form(c, str(form["action"]), {"next_step": step, "evidence": "kept"})
    assert status == 422
    field = soup.select_one("textarea[name=next_step]")
    assert field is not None and field.get_text() == step
    _said_limit(soup, int(field["maxlength"]), len(step))
    with live.factory() as s:
        entry = s.scalar(select(NotebookEntry).where(NotebookEntry.run_id == run_id))
        assert entry is not None and not entry.next_step and not entry.evidence


def test_a_long_quiz_answer_is_refused_with_its_limit(live: Stack) -> None:
    """The numeric widget allows 60 characters; the server cut at 2,000 and then
    answered "not a number", which named no limit."""
    c = live.learner()
    answer = "4" * 61
    status, soup = _form(c, "/quiz/term:alpha/q2", {"answer": answer})
    assert status == 422
    field = soup.select_one("input[name=answer]")
    assert field is not None and field["value"] == answer
    _said_limit(soup, int(field["maxlength"]), len(answer))


def test_a_long_search_says_it_searched_the_first_characters(live: Stack) -> None:
    """A search is a GET: it is not refused, but it says what it searched for (it cut
    at 200 characters without a word, while its box allowed 1,000)."""
    c = live.learner()
    q = "alpha " * 50
    soup = BeautifulSoup(c.get("/search", params={"q": q}).text, "html.parser")
    field = soup.select_one("input#q")
    assert field is not None
    limit = int(field["maxlength"])
    assert field["value"] == q[:limit]
    _said_limit(soup, limit, len(q))
    assert soup.select(".search-note")


def test_a_long_notebook_search_says_it_searched_the_first_characters(live: Stack) -> None:
    c = live.learner()
    q = "n" * 250
    soup = BeautifulSoup(c.get("/notebook", params={"q": q}).text, "html.parser")
    field = soup.select_one("input#nbq")
    assert field is not None
    limit = int(field["maxlength"])
    assert field["value"] == q[:limit]
    _said_limit(soup, limit, len(q))


def test_a_long_goto_query_says_it_matched_the_first_characters(live: Stack) -> None:
    """The "Go to" box matched titles on a query's first 200 characters without a word."""
    c = live.learner()
    soup = BeautifulSoup(c.get("/goto", params={"q": "n" * 250}).text, "html.parser")
    _said_limit(soup, 200, 250)


def test_a_lab_started_from_a_page_named_too_long_is_refused_not_cut(live: Stack) -> None:
    """The embed's hidden ``_source`` (the page a lab starts from, set by the server's
    templates) was cut to 140 characters when a client sent more."""
    c = live.learner()
    before = _runs_of(live, c)
    source = "lesson:" + "x" * 200
    status, soup = _form(
        c, "/labs/block-quantize/runs", {**SMALL, "_prediction": "3", "_source": source}
    )
    assert status == 422
    _said_limit(soup, 140, len(source))
    assert _runs_of(live, c) == before
