"""Sign up (keeps this browser's progress), sign in (claims it), sign out, change password."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from app.accounts import AccountError, authenticate, change_password, claim, create_account
from app.db import Learner
from app.deps import FormDep, LearnerRowDep, SessionDep, SettingsDep, ensure_learner
from app.templating import render

router = APIRouter(tags=["accounts"])


def _fields(form: FormData, *names: str) -> list[str]:
    return [str(form.get(n, ""))[:300] for n in names]


def _safe_next(raw: str) -> str:
    return raw if raw.startswith("/") and not raw.startswith("//") else "/progress"


@router.get("/signup", response_class=HTMLResponse)
def signup_form(request: Request, learner: LearnerRowDep) -> Response:
    return render(request, "accounts/signup.html", {"me": learner})


@router.post("/signup", response_class=HTMLResponse)
def signup(
    request: Request, session: SessionDep, learner: LearnerRowDep, form: FormDep
) -> Response:
    username, password, password2 = _fields(form, "username", "password", "password2")
    try:
        if learner.username:
            raise AccountError("You are signed in already; sign out to create another account.")
        if password != password2:
            raise AccountError("The two passwords differ.")
        account = create_account(session, username.strip(), password, learner_id=learner.id)
    except AccountError as e:
        return render(
            request,
            "accounts/signup.html",
            {"me": learner, "error": str(e), "username": username},
            status_code=422,
        )
    request.state.set_session = (account.id, account.username)
    return RedirectResponse("/progress", status_code=303)


@router.get("/signin", response_class=HTMLResponse)
def signin_form(request: Request, next: str = "/progress") -> Response:
    return render(request, "accounts/signin.html", {"next": _safe_next(next)})


@router.post("/signin", response_class=HTMLResponse)
def signin(request: Request, session: SessionDep, settings: SettingsDep, form: FormDep) -> Response:
    username, password, nxt = _fields(form, "username", "password", "next")
    ip = request.client.host if request.client else "?"
    try:
        account = authenticate(
            session,
            username.strip(),
            password,
            f"{username.strip().lower()}|{ip}",
            settings.login_attempts_per_minute,
        )
    except AccountError as e:
        status = 429 if "Too many" in str(e) else 422
        return render(
            request,
            "accounts/signin.html",
            {"error": str(e), "username": username, "next": _safe_next(nxt)},
            status_code=status,
        )
    anon = ensure_learner(session, request.state.learner_id)
    if not anon.username:
        claim(session, anon.id, account.id)
    request.state.set_session = (account.id, account.username)
    return RedirectResponse(_safe_next(nxt), status_code=303)


@router.post("/signout")
def signout(request: Request) -> Response:
    request.state.set_session = uuid.uuid4().hex  # a fresh anonymous learner
    return RedirectResponse("/", status_code=303)


@router.get("/account", response_class=HTMLResponse)
def account_page(request: Request, learner: LearnerRowDep) -> Response:
    if not learner.username:
        return RedirectResponse("/signin?next=/account", status_code=303)
    return render(request, "accounts/account.html", {"me": learner})


@router.post("/account/password", response_class=HTMLResponse)
def password(
    request: Request, session: SessionDep, learner: LearnerRowDep, form: FormDep
) -> Response:
    if not learner.username:
        return RedirectResponse("/signin?next=/account", status_code=303)
    old, new, new2 = _fields(form, "old", "new", "new2")
    try:
        if new != new2:
            raise AccountError("The two new passwords differ.")
        me = session.get(Learner, learner.id)
        assert me is not None
        change_password(session, me, old, new)
    except AccountError as e:
        return render(
            request, "accounts/account.html", {"me": learner, "error": str(e)}, status_code=422
        )
    return render(request, "accounts/account.html", {"me": learner, "message": "Password changed."})
