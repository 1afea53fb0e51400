"""Accounts: argon2 password hashes, sign-in rate limiting, and claiming the
anonymous progress made in this browser."""

from __future__ import annotations

import getpass
import re
import sys

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db import (
    Learner,
    NotebookEntry,
    PageVisit,
    QuizAttempt,
    ReviewCard,
    ReviewLog,
    Run,
    make_engine,
    make_sessionmaker,
)
from app.ratelimit import Limiter
from app.settings import Settings
from app.textfields import too_long

MIN_USERNAME = 3
MAX_USERNAME = 40
USERNAME_RE = re.compile(rf"^[A-Za-z0-9_.-]{{{MIN_USERNAME},{MAX_USERNAME}}}$")
MIN_PASSWORD = 10
MAX_PASSWORD = 256
_hasher = PasswordHasher()


class AccountError(ValueError):
    """A message for the learner (never reveals whether a username exists on sign-in)."""


def check_lengths(username: str, password: str) -> None:
    """Refuse (``AccountError``) a username or password longer than any account can
    have, naming the limit: neither is ever cut to fit."""
    message = too_long("A username", username, MAX_USERNAME) or too_long(
        "A password", password, MAX_PASSWORD
    )
    if message:
        raise AccountError(message)


def check_new_credentials(username: str, password: str) -> None:
    check_lengths(username, password)
    if not USERNAME_RE.match(username):
        raise AccountError(
            f"Usernames are {MIN_USERNAME}–{MAX_USERNAME} letters, digits, '.', '_' or '-'."
        )
    if len(password) < MIN_PASSWORD:
        raise AccountError(f"Passwords need {MIN_PASSWORD} to {MAX_PASSWORD} characters.")


def create_account(
    session: Session,
    username: str,
    password: str,
    *,
    learner_id: str | None = None,
    admin: bool = False,
) -> Learner:
    """Turn this browser's anonymous learner into an account (keeping its progress), or make a new one."""
    check_new_credentials(username, password)
    if session.scalar(select(Learner).where(func.lower(Learner.username) == username.lower())):
        raise AccountError("That username is taken.")
    learner = session.get(Learner, learner_id) if learner_id else None
    if learner is None or learner.username:
        learner = (
            Learner()
            if learner_id is None or (learner and learner.username)
            else Learner(id=learner_id)
        )
        session.add(learner)
    learner.username = username
    learner.password_hash = _hasher.hash(password)
    learner.is_admin = admin
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise AccountError("That username is taken.") from None
    return learner


def authenticate(
    session: Session, username: str, password: str, limiter: Limiter, ip: str
) -> Learner:
    """The account for ``username`` + ``password``.

    Every attempt is counted before the password is checked, in one atomic step per
    limit (so concurrent guesses cannot all slip under it): per username from this
    client, per client over all usernames, and per username over all clients (a
    looser hourly limit, so one client's guesses cannot lock the owner out elsewhere).
    A successful sign-in clears this client's count for the username.
    Raises ``RateLimited`` (429) or ``AccountError`` (422)."""
    name = username.lower()
    limiter.hit(limiter.signin_ip, ip)
    check_lengths(username, password)  # no such account: said before the per-name counts
    limiter.hit(limiter.signin_user_ip, name, ip)
    limiter.hit(limiter.signin_user, name)
    learner = session.scalar(select(Learner).where(func.lower(Learner.username) == name))
    ok = False
    if learner is not None and learner.password_hash:
        try:
            ok = _hasher.verify(learner.password_hash, password)
        except (VerificationError, InvalidHashError):
            ok = False
    else:
        _hasher.hash("timing-equaliser")  # same cost whether or not the user exists
    if not ok or learner is None:
        raise AccountError("Username or password is wrong.")
    limiter.clear(limiter.signin_user_ip, name, ip)
    if _hasher.check_needs_rehash(learner.password_hash or ""):
        learner.password_hash = _hasher.hash(password)
        session.commit()
    return learner


def change_password(session: Session, learner: Learner, old: str, new: str) -> None:
    if len(old) > MAX_PASSWORD:
        raise AccountError("The current password is wrong.")
    try:
        _hasher.verify(learner.password_hash or "", old)
    except (VerificationError, InvalidHashError):
        raise AccountError("The current password is wrong.") from None
    check_new_credentials(learner.username or "", new)
    learner.password_hash = _hasher.hash(new)
    session.commit()


def claim(session: Session, anon_id: str, account_id: str) -> None:
    """Move everything an anonymous learner did in this browser to the account."""
    if anon_id == account_id:
        return
    anon = session.get(Learner, anon_id)
    if anon is None or anon.username:
        return
    for model in (Run, QuizAttempt, NotebookEntry):
        session.execute(
            update(model).where(model.learner_id == anon_id).values(learner_id=account_id)
        )
    # Review cards and visits are unique per learner: keep the account's where both exist.
    have = set(session.scalars(select(ReviewCard.ref).where(ReviewCard.learner_id == account_id)))
    for card in session.scalars(select(ReviewCard).where(ReviewCard.learner_id == anon_id)).all():
        if card.ref in have:
            session.delete(card)
        else:
            card.learner_id = account_id
    session.execute(
        update(ReviewLog).where(ReviewLog.learner_id == anon_id).values(learner_id=account_id)
    )
    seen = {
        (v.kind, v.slug, v.detail)
        for v in session.scalars(select(PageVisit).where(PageVisit.learner_id == account_id))
    }
    for v in session.scalars(select(PageVisit).where(PageVisit.learner_id == anon_id)).all():
        if (v.kind, v.slug, v.detail) in seen:
            session.delete(v)
        else:
            v.learner_id = account_id
    anon.merged_into = account_id
    session.commit()


def create_user_cli(settings: Settings, username: str, *, admin: bool, password: str | None) -> int:
    if password is None:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("lowbit: the passwords differ", file=sys.stderr)
            return 2
    session = make_sessionmaker(make_engine(settings.db_url))()
    try:
        create_account(session, username, password, admin=admin)
    except AccountError as e:
        print(f"lowbit: {e}", file=sys.stderr)
        return 2
    finally:
        session.close()
    print(f"created {'admin ' if admin else ''}account {username}")
    return 0
