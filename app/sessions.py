"""Server-side sign-in sessions.

A signed-in browser holds a random token (in the signed session cookie); the
database holds only its SHA-256 with the learner and an expiry. Every sign-in
and sign-up makes a new token (the cookie held before never becomes a key to the
account), sign-out deletes it, and a password change or "sign out everywhere"
deletes every other session of the account.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.db import AuthSession, Learner, utcnow

TOKEN_BYTES = 32


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def start(db: Session, learner_id: str, days: float) -> str:
    """A new session for ``learner_id`` lasting ``days``; returns the cookie token."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    now = utcnow()
    db.add(
        AuthSession(
            token_hash=_hash(token),
            learner_id=learner_id,
            created_at=now,
            expires_at=now + timedelta(days=days),
        )
    )
    # Expired sessions go whenever a new one starts: the table stays small.
    db.execute(delete(AuthSession).where(AuthSession.expires_at < now))
    db.commit()
    return token


def resolve(db: Session, token: str) -> tuple[str, str | None] | None:
    """``(learner_id, username)`` for a live session token, else None."""
    row = db.execute(
        select(AuthSession.learner_id, AuthSession.expires_at, Learner.username)
        .join(Learner, Learner.id == AuthSession.learner_id)
        .where(AuthSession.token_hash == _hash(token))
    ).first()
    if row is None or row.expires_at <= utcnow():
        return None
    return row.learner_id, row.username


def end(db: Session, token: str) -> None:
    db.execute(delete(AuthSession).where(AuthSession.token_hash == _hash(token)))
    db.commit()


def end_all(db: Session, learner_id: str, *, keep: str | None = None) -> int:
    """End every session of ``learner_id`` except ``keep``; returns how many ended."""
    q = delete(AuthSession).where(AuthSession.learner_id == learner_id)
    if keep:
        q = q.where(AuthSession.token_hash != _hash(keep))
    n = getattr(db.execute(q), "rowcount", 0)
    db.commit()
    return int(n or 0)


def count(db: Session, learner_id: str) -> int:
    return len(
        db.scalars(
            select(AuthSession.token_hash).where(
                AuthSession.learner_id == learner_id, AuthSession.expires_at > utcnow()
            )
        ).all()
    )
