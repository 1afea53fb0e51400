"""Sign up (keeps this browser's progress), sign in (claims it), sign out, change password."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session
from starlette.datastructures import FormData

from app import routes, sessions
from app.accounts import AccountError, authenticate, change_password, claim, create_account
from app.db import Learner, new_id
from app.deps import FormDep, LearnerRowDep, SessionDep, SettingsDep
from app.ratelimit import RateLimited
from app.settings import Settings
from app.templating import render

router = routes.router(tags=["accounts"])


def _fields(form: FormData, *names: str) -> list[str]:
    """As typed: lengths are checked by app.accounts, which names the limit."""
    return [str(form.get(n, "")) for n in names]


def _safe_next(raw: str) -> str:
    return raw if raw.startswith("/") and not raw.startswith("//") else "/progress"


@router.get("/signup", response_class=HTMLResponse)
def signup_form(request: Request, learner: LearnerRowDep) -> Response:
    return render(request, "accounts/signup.html", {"me": learner})


@router.post("/signup", response_class=HTMLResponse)
def signup(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    learner: LearnerRowDep,
    form: FormDep,
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
    _sign_in(request, session, settings, account.id)
    return RedirectResponse("/progress", status_code=303)


@router.get("/signin", response_class=HTMLResponse)
def signin_form(request: Request, next: str = "/progress") -> Response:
    return render(request, "accounts/signin.html", {"next": _safe_next(next)})


@router.post("/signin", response_class=HTMLResponse)
def signin(request: Request, session: SessionDep, settings: SettingsDep, form: FormDep) -> Response:
    username, password, nxt = _fields(form, "username", "password", "next")
    limiter = request.app.state.limiter
    try:
        account = authenticate(
            session, username.strip(), password, limiter, request.state.client_key
        )
    except (AccountError, RateLimited) as e:
        status, headers = 422, {}
        if isinstance(e, RateLimited):
            status, headers = 429, {"Retry-After": str(e.retry_after)}
        resp = render(
            request,
            "accounts/signin.html",
            {"error": str(e), "username": username, "next": _safe_next(nxt)},
            status_code=status,
        )
        resp.headers.update(headers)
        return resp
    if not request.state.signed_in:
        anon = session.get(Learner, request.state.learner_id)
        if anon is not None and not anon.username:
            claim(session, anon.id, account.id)
    elif request.state.session_token:  # signing in as someone else ends this session
        sessions.end(session, request.state.session_token)
    _sign_in(request, session, settings, account.id)
    return RedirectResponse(_safe_next(nxt), status_code=303)


def _sign_in(request: Request, session: Session, settings: Settings, learner_id: str) -> None:
    """A new server-side session for this browser: a new identifier on every sign-in
    and sign-up, so the cookie held before never becomes a key to the account."""
    token = sessions.start(session, learner_id, settings.session_days)
    request.state.session_data = {"s": token}


def _anonymous_again(request: Request) -> None:
    request.state.session_data = {"l": new_id()}


@router.post("/signout")
def signout(request: Request, session: SessionDep) -> Response:
    if request.state.session_token:
        sessions.end(session, request.state.session_token)
    _anonymous_again(request)
    return RedirectResponse("/", status_code=303)


@router.post("/account/signout-everywhere")
def signout_everywhere(request: Request, session: SessionDep, learner: LearnerRowDep) -> Response:
    """End every session of the account, this browser's included."""
    if learner.username:
        sessions.end_all(session, learner.id)
    _anonymous_again(request)
    return RedirectResponse("/", status_code=303)


@router.get("/account", response_class=HTMLResponse)
def account_page(request: Request, session: SessionDep, learner: LearnerRowDep) -> Response:
    if not learner.username:
        return RedirectResponse("/signin?next=/account", status_code=303)
    return _account_page(request, session, learner)


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
        # A changed password ends every other session: a stolen cookie dies with it.
        sessions.end_all(session, me.id, keep=request.state.session_token)
    except AccountError as e:
        return _account_page(request, session, learner, error=str(e), status_code=422)
    return _account_page(request, session, learner, message="Password changed.")


def _account_page(
    request: Request, session: Session, learner: Learner, status_code: int = 200, **ctx: str
) -> Response:
    count = sessions.count(session, learner.id)
    return render(
        request,
        "accounts/account.html",
        {"me": learner, "session_count": count, **ctx},
        status_code=status_code,
    )
