"""Hostile input against every route, found by walking the app's routes (so a new
route is checked the day it is added): security headers and cookie flags on every
page, CSRF on every unsafe route, other learners' ids on every per-learner route,
and an XSS corpus through every free-text field of every form.

In process on the real content; a route with a path parameter no test knows fails
``path_params`` until a real value is added to ``Seeded.path_values``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from app.db import Learner, NotebookEntry, QuizAttempt, Run, make_engine, make_sessionmaker
from app.deps import get_learner, get_learner_id
from app.middleware import CSP, CSRF_COOKIE, SESSION_COOKIE, LowbitMiddleware
from app.settings import Settings
from tests.inprocess import (
    InProcess,
    Seeded,
    app_routes,
    fill_path,
    path_params,
    seed_learner,
)

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
# Path parameters that name something a learner owns: another learner gets 404.
OWNED = {"run_id", "card_id", "entry_id", "submission_id"}
# Path parameters that name public things (content, labs, static files).
PUBLIC = {"lab_id", "slug", "cid", "owner", "item_id", "name", "seq", "exercise_id"}
# Query strings that carry owned ids, per route.
OWNED_QUERIES = {
    "/runs/compare": "a={run_id}&b={run_id}",
    "/labs/{lab_id}": "rerun={run_id}",
}
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}
MARK = "lbx"
XSS_CORPUS = [
    '<script>alert("lbx1")</script>',
    "\"><img src=x onerror=alert('lbx2')>",
    "'><svg/onload=alert('lbx3')>",
    "javascript:alert('lbx4')",
    "</textarea><script>lbx5()</script>",
    "<lbx6 x=1>text",
    "{{ 7*7 }}lbx7{% raw %}",
    '" autofocus onfocus="lbx8()',
    '<a href="javascript:lbx9()">x</a>',
    "]]><!--lbx10--><iframe src=//example.org>",
    "$$\\href{javascript:alert('lbx11')}{x}$$",
    "[x](javascript:alert('lbx12'))",
]
DOCS_PAGES = {"/api/docs", "/docs/oauth2-redirect"}
URL_ATTRS = {"href", "src", "action", "formaction", "xlink:href", "data", "hx-get", "hx-post"}


@pytest.fixture(scope="module")
def alice(inproc: InProcess) -> Seeded:
    return seed_learner(inproc)


@pytest.fixture(scope="module")
def admin(inproc: InProcess) -> Seeded:
    me = seed_learner(inproc)
    engine = make_engine(inproc.settings.db_url)
    with make_sessionmaker(engine)() as s:
        s.execute(update(Learner).where(Learner.username == me.username).values(is_admin=True))
        s.commit()
    engine.dispose()
    return me


def uses_learner(route: Any) -> bool:
    def calls(d: Any) -> set[Any]:
        out: set[Any] = set()
        for x in d.dependencies:
            out |= {x.call} | calls(x)
        return out

    dependant = getattr(route, "dependant", None)
    return dependant is not None and bool(calls(dependant) & {get_learner_id, get_learner})


def get_paths(inproc: InProcess, me: Seeded) -> list[str]:
    """Every GET route with real path values, plus every lab page."""
    values = me.path_values(inproc.app)
    paths = [fill_path(p, values) for p, r in app_routes(inproc.app) if "GET" in r.methods]
    labs = inproc.learner().get("/api/labs").json()
    return paths + [f"/labs/{lab['id']}" for lab in labs]


def check_headers(r: Any, where: str) -> None:
    for name, want in SECURITY_HEADERS.items():
        assert r.headers.get(name) == want, (where, name, r.headers.get(name))
    assert r.headers.get("x-request-id"), where
    # Pages from our templates vary on HX-Request; FastAPI's own docs pages do not.
    if r.headers.get("content-type", "").startswith("text/html") and where not in DOCS_PAGES:
        assert "HX-Request" in r.headers.get("vary", ""), where


def test_security_headers_and_cookie_flags_on_every_page(
    inproc: InProcess, alice: Seeded, admin: Seeded
) -> None:
    paths = get_paths(inproc, alice)
    assert len(paths) > 40
    seen = {}
    for who in (alice.client, admin.client):
        for path in [*paths, "/no-such-page", "/terms/no-such-term", "/api/runs/0"]:
            r = who.get(path)
            assert r.status_code < 500, (path, r.status_code, r.text[:500])
            check_headers(r, path)
            seen[path] = r.status_code
    assert seen["/admin"] == 200 and alice.client.get("/admin").status_code == 404
    print(f"\nsecurity headers: {len(seen)} pages, each as two learners and as a first visit")
    # A first visit to any page sets both cookies, with the flags that keep them safe.
    for path in paths:
        fresh = TestClient(inproc.app, follow_redirects=False)
        r = fresh.get(path)
        check_headers(r, path)
        cookies = {c.split("=", 1)[0]: c.lower() for c in r.headers.get_list("set-cookie")}
        assert set(cookies) >= {SESSION_COOKIE, CSRF_COOKIE}, (path, cookies)
        for name, c in cookies.items():
            assert "samesite=lax" in c and "path=/" in c, (path, c)
        assert "httponly" in cookies[SESSION_COOKIE]
        assert "httponly" not in cookies[CSRF_COOKIE]  # the page's script echoes it


def test_cookies_are_secure_behind_https() -> None:
    def ok(_: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = LowbitMiddleware(
        Starlette(routes=[Route("/", ok)]),
        Settings(env="test", secure_cookies=True, secret_key="x" * 32),
    )
    r = TestClient(app).get("/")
    flags = [c.lower() for c in r.headers.get_list("set-cookie")]
    assert len(flags) == 2 and all("; secure" in c for c in flags), flags
    check_headers(r, "/")


def counts(inproc: InProcess) -> tuple[int, int, int]:
    engine = make_engine(inproc.settings.db_url)
    try:
        with make_sessionmaker(engine)() as s:
            return tuple(  # type: ignore[return-value]
                s.scalar(select(func.count()).select_from(t)) or 0
                for t in (Run, QuizAttempt, NotebookEntry)
            )
    finally:
        engine.dispose()


def test_every_unsafe_route_refuses_a_missing_or_wrong_csrf_token(inproc: InProcess) -> None:
    alice = seed_learner(inproc)  # her own: the control requests include signing out
    values = alice.path_values(inproc.app)
    unsafe = [(m, p) for p, r in app_routes(inproc.app) for m in r.methods if m in UNSAFE]
    assert len(unsafe) >= 14
    before = counts(inproc)
    token = alice.client.cookies[CSRF_COOKIE]
    form = {"mode": "ok", "answer": "1", "rating": "3", "next_step": "x", "username": "u"}
    for method, path in unsafe:
        url = fill_path(path, values)
        attempts = {
            "no token": {"headers": {"X-CSRF-Token": ""}, "json": {}},
            "wrong header": {"headers": {"X-CSRF-Token": "w" * 43}, "json": {}},
            "wrong form field": {
                "headers": {"X-CSRF-Token": ""},
                "data": {**form, "csrf_token": "w" * 43},
            },
            "form without field": {"headers": {"X-CSRF-Token": ""}, "data": form},
            "other site's token": {
                "headers": {"X-CSRF-Token": inproc.learner().cookies[CSRF_COOKIE]},
                "json": {},
            },
        }
        for why, kw in attempts.items():
            r = alice.client.request(method, url, **kw)
            assert r.status_code == 403, (method, path, why, r.status_code)
            check_headers(r, f"{method} {path}")
        # No cookie at all (a request forged from another site without them).
        r = TestClient(inproc.app).request(method, url, data={**form, "csrf_token": token})
        assert r.status_code == 403, (method, path, "no cookies")
        # The control: with the token the same request is not refused for CSRF.
        good = alice.client.request(method, url, data={**form, "csrf_token": token})
        assert good.status_code != 403 or "CSRF" not in good.text, (method, path)
    print(
        f"\nCSRF: {len(unsafe)} unsafe routes, {len(unsafe) * (len(attempts) + 1)} refused requests"
    )
    after = counts(inproc)
    # Only the control requests wrote anything (at most one row each).
    assert all(a - b <= len(unsafe) for a, b in zip(after, before, strict=True))


def test_no_learner_reaches_another_learners_things(inproc: InProcess, alice: Seeded) -> None:
    bob = inproc.learner()
    token = bob.cookies[CSRF_COOKIE]
    values = alice.path_values(inproc.app)
    checked = 0
    for path, route in app_routes(inproc.app):
        if not uses_learner(route):
            continue
        names = set(path_params(path, values))
        unknown = names - OWNED - PUBLIC
        assert not unknown, f"{path}: classify path parameters {unknown} as OWNED or PUBLIC"
        for method in route.methods - {"HEAD"}:
            url = fill_path(path, values)
            if path in OWNED_QUERIES:
                url += "?" + OWNED_QUERIES[path].format(**values)
            r = bob.request(method, url, data={"csrf_token": token, "mode": "ok", "rating": "3"})
            assert r.status_code < 500, (method, url, r.status_code)
            if names & OWNED:
                assert r.status_code == 404, (method, url, r.status_code)
            body = r.text
            secrets = (alice.marker, alice.run_id, alice.queued_run_id, alice.entry_id)
            for secret in (*secrets, alice.submission_id):
                assert secret not in body, (method, url, "shows alice's", secret)
            assert f">{alice.username}<" not in body, (method, url)
            checked += 1
    print(f"\ncross-learner: {checked} route and method pairs")
    assert checked >= 25
    # Alice's things are untouched: her queued run is still queued, and hers to see.
    r = alice.client.get(f"/api/runs/{alice.queued_run_id}")
    assert r.status_code == 200 and r.json()["status"] == "queued"
    assert alice.marker in alice.client.get("/notebook").text


def injected(html: str) -> list[str]:
    """What in ``html`` came from a corpus payload instead of being escaped."""
    found = [p for p in XSS_CORPUS if ("<" in p or '"' in p) and p in html]
    if "49lbx7" in html:
        found.append("template expression evaluated")
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup.find_all(True):
        if MARK in tag.name:
            found.append(f"<{tag.name}> element")
        for attr, val in tag.attrs.items():
            text = " ".join(val) if isinstance(val, list) else str(val)
            if attr.startswith("on") or MARK in attr:
                found.append(f"{attr}= on <{tag.name}>")
            if attr in URL_ATTRS and text.strip().lower().startswith("javascript:"):
                found.append(f"{attr}={text[:60]} on <{tag.name}>")
        if tag.name in {"script", "iframe", "object", "embed", "base"} and (
            MARK in tag.get_text() or MARK in str(tag.attrs)
        ):
            found.append(f"<{tag.name}> with a payload")
    return found


def forms_on(html: str, page: str) -> list[tuple[str, str, dict[str, str], list[str]]]:
    """(method, action, default fields, free-text field names) of every form."""
    out = []
    for form in BeautifulSoup(html, "html.parser").find_all("form"):
        method = str(form.get("method") or "get").upper()
        action = str(form.get("action") or page)
        fields: dict[str, str] = {}
        text: list[str] = []
        for el in form.find_all(["input", "textarea", "select"]):
            name = str(el.get("name") or "")
            if not name:
                continue
            kind = str(el.get("type") or "text").lower()
            if el.name == "select":
                opt = el.find("option", selected=True) or el.find("option")
                fields[name] = str(opt.get("value", opt.get_text())) if opt else ""
            elif el.name == "textarea" or kind in {"text", "search", "email", "url"}:
                fields[name] = el.get_text() if el.name == "textarea" else str(el.get("value", ""))
                text.append(name)
            elif kind in {"checkbox", "radio"}:
                fields.setdefault(name, str(el.get("value", "on")))
            elif kind not in {"submit", "button", "file", "image", "reset"}:
                fields[name] = str(el.get("value", ""))
        if text:
            out.append((method, action, fields, text))
    return out


def test_an_xss_corpus_through_every_free_text_field_comes_back_escaped(
    inproc: InProcess, alice: Seeded
) -> None:
    me = seed_learner(inproc)  # its own learner: this test fills quotas and notebooks
    c = me.client
    token = c.cookies[CSRF_COOKIE]
    pages = [p for p in get_paths(inproc, me) if not p.startswith(("/api/", "/static/"))]
    forms: dict[tuple[str, str], tuple[dict[str, str], list[str]]] = {}
    for page in pages:
        r = c.get(page)
        if r.headers.get("content-type", "").startswith("text/html"):
            for method, action, fields, text in forms_on(r.text, page):
                forms.setdefault((method, action), (fields, text))
    actions = {a.split("?")[0].split("/")[1] for _, a in forms}
    assert {"labs", "quiz", "notebook", "search", "signin", "signup"} <= actions, actions
    sent = 0
    for (method, action), (fields, text) in forms.items():
        for i in range(len(XSS_CORPUS)):
            data = dict(fields)
            for j, name in enumerate(text):
                data[name] = XSS_CORPUS[(i + j) % len(XSS_CORPUS)]
            if method == "GET":
                r = c.get(action + "?" + urlencode(data))
            else:
                r = c.post(action, data={**data, "csrf_token": token}, headers={"X-CSRF-Token": ""})
                if r.status_code in (302, 303):
                    r = c.get(r.headers["location"])
            sent += 1
            assert r.status_code < 500, (method, action, data, r.status_code)
            if r.headers.get("content-type", "").startswith("text/html"):
                assert not injected(r.text), (method, action, injected(r.text))
    print(f"\nXSS corpus: {sent} submissions through {len(forms)} forms")
    assert sent >= len(XSS_CORPUS) * 20
    # Through the JSON API too: a free-text lab parameter shown on the run page.
    for payload in XSS_CORPUS[:2]:
        r = c.post("/api/labs/sandbox-probe/runs", json={"mode": "ok", "target": payload})
        if r.status_code == 202:
            assert not injected(c.get(f"/runs/{r.json()['id']}").text)
            c.post(f"/api/runs/{r.json()['id']}/cancel")
    # Everything stored is shown escaped wherever it appears later.
    history = BeautifulSoup(c.get("/runs").text, "html.parser")
    later = [*pages, *{str(a["href"]) for a in history.select('a[href^="/runs/"]')}]
    for page in later:
        r = c.get(page)
        if r.headers.get("content-type", "").startswith("text/html"):
            assert not injected(r.text), (page, injected(r.text))
    notebook = c.get("/notebook").text
    assert "lbx1" in notebook  # the payloads were stored, and shown as text


def test_the_injection_check_sees_what_it_must() -> None:
    for payload in XSS_CORPUS[:3] + XSS_CORPUS[4:6] + XSS_CORPUS[8:10]:
        assert injected(f"<p>{payload}</p>"), payload
    assert injected('<a href="javascript:alert(1)">x</a>')
    assert injected("<p>49lbx7</p>")
    from markupsafe import escape

    assert not any(injected(f"<p title='{escape(p)}'>{escape(p)}</p>") for p in XSS_CORPUS)
