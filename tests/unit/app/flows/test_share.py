"""Defect 10 (issue 14): a learner makes one run public with an explicit, revocable
link; the shared page is read-only and shows no learner identity or notebook text."""

from __future__ import annotations

from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.db import RunEvent
from tests.unit.app.flows.helpers import learner_id, make_entry, make_run

HX = {"HX-Request": "true"}
SVG = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1 1"><rect width="1" height="1"/></svg>'


def _csrf(client) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"csrf_token": client.headers["X-CSRF-Token"]}


def _link(html: str) -> str:
    box = BeautifulSoup(html, "html.parser").select_one(".share-box input.share-link")
    assert box is not None, html[:1000]
    return "/shared/" + str(box["value"]).rsplit("/shared/", 1)[1]


def test_share_then_revoke(learner, flows_app) -> None:
    owner = learner
    run_id = make_run(owner, environment={"host": "worker-host-7", "device": "cpu"})
    make_entry(owner, run_id, prediction="secret-notebook-words", next_step="private plan")
    with owner.app.state.sessionmaker() as s:
        s.add(RunEvent(run_id=run_id, seq=1, kind="plot", data={"title": "errors", "svg": SVG}))
        s.commit()
    page = owner.get(f"/runs/{run_id}").text
    assert "Make a share link" in page and "/shared/" not in page  # private until asked
    r = owner.post(f"/runs/{run_id}/share", data=_csrf(owner), headers=HX)
    assert r.status_code == 200
    link = _link(r.text)
    token = link.rsplit("/", 1)[1]
    assert len(token) >= 40
    again = owner.post(f"/runs/{run_id}/share", data=_csrf(owner))  # idempotent, no JS
    assert again.status_code == 303 and _link(owner.get(f"/runs/{run_id}").text) == link

    stranger = TestClient(flows_app, follow_redirects=False)
    shared = stranger.get(link)
    assert shared.status_code == 200 and shared.headers["cache-control"] == "no-store"
    doc = BeautifulSoup(shared.text, "html.parser")
    assert "format int4 · shape 256, 256 · seed 0" in doc.text and "20.41" in doc.text
    assert learner_id(owner) not in shared.text and run_id not in shared.text
    for private in (
        "secret-notebook-words",
        "private plan",
        "worker-host-7",
        owner.cookies.get("lowbit_session", "x"),
    ):
        assert private not in shared.text
    assert not doc.select("form[method=post]")  # read-only: nothing to cancel, rate or reflect
    img = doc.select_one("figure.plot img")["src"]
    assert img == f"/shared/{token}/plots/1.svg"
    assert stranger.get(img).headers["content-type"].startswith("image/svg+xml")
    assert stranger.get(f"/runs/{run_id}").status_code == 404  # the run itself stays private

    r = owner.post(f"/runs/{run_id}/share/revoke", data=_csrf(owner), headers=HX)
    assert "Make a share link" in r.text
    assert stranger.get(link).status_code == 404 and stranger.get(img).status_code == 404
    owner.post(f"/runs/{run_id}/share", data=_csrf(owner))
    assert _link(owner.get(f"/runs/{run_id}").text) != link  # a new link, the old one stays dead


def test_only_the_owner_can_share_and_csrf_is_required(learner, flows_app) -> None:
    member = learner
    run_id = make_run(member)
    other = TestClient(flows_app, follow_redirects=False)
    other.get("/healthz")
    token = other.cookies["lowbit_csrf"]
    for path in (f"/runs/{run_id}/share", f"/runs/{run_id}/share/revoke"):
        assert other.post(path, data={"csrf_token": token}).status_code == 404
        assert member.post(path, data={}, headers={"X-CSRF-Token": ""}).status_code == 403
    queued = make_run(member, status="queued", result=None)
    assert member.post(f"/runs/{queued}/share", data=_csrf(member)).status_code == 409
    assert TestClient(flows_app).get("/shared/" + "x" * 43).status_code == 404
