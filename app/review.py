"""Spaced review with FSRS: each quick-check item and each wrong prediction becomes
a card; ratings move its due date."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from fsrs import Card, Rating, Scheduler
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db import ReviewCard, ReviewLog, utcnow

RATINGS = {1: Rating.Again, 2: Rating.Hard, 3: Rating.Good, 4: Rating.Easy}
RATING_NAMES = {1: "Again", 2: "Hard", 3: "Good", 4: "Easy"}


def scheduler() -> Scheduler:
    # No fuzzing: the same ratings give the same schedule, which learners (and tests) can rely on.
    return Scheduler(enable_fuzzing=False)


def get_or_create(
    session: Session, learner_id: str, kind: str, ref: str, now: datetime | None = None
) -> ReviewCard:
    card = session.scalar(
        select(ReviewCard).where(
            ReviewCard.learner_id == learner_id, ReviewCard.kind == kind, ReviewCard.ref == ref
        )
    )
    if card is None:
        now = now or utcnow()
        fsrs_card = Card(due=now)
        card = ReviewCard(
            learner_id=learner_id, kind=kind, ref=ref, fsrs=fsrs_card.to_dict(), due=now
        )
        session.add(card)
        session.flush()
    return card


def rate(
    session: Session, card: ReviewCard, rating: int, now: datetime | None = None
) -> ReviewCard:
    """Apply one rating (1 Again, 2 Hard, 3 Good, 4 Easy) and move the due date."""
    if rating not in RATINGS:
        raise ValueError("rating must be 1 (Again), 2 (Hard), 3 (Good) or 4 (Easy)")
    now = now or utcnow()
    fsrs_card = Card.from_dict(card.fsrs)  # type: ignore[arg-type]
    fsrs_card, _ = scheduler().review_card(fsrs_card, RATINGS[rating], review_datetime=now)
    card.fsrs = dict(fsrs_card.to_dict())
    card.due = fsrs_card.due
    card.reps += 1
    if rating == 1:
        card.lapses += 1
    card.last_review = now
    session.add(
        ReviewLog(card_id=card.id, learner_id=card.learner_id, rating=rating, reviewed_at=now)
    )
    return card


@dataclass
class Outlook:
    due_now: int
    reviewed_today: int
    limit: int
    by_day: list[tuple[str, int]]  # next 7 days: (date, cards due that day)
    later_today: int = 0  # not due yet, but due before midnight UTC (an "Again" comes back)

    @property
    def remaining_today(self) -> int:
        return max(0, min(self.due_now, self.limit - self.reviewed_today))


def outlook(session: Session, learner_id: str, limit: int, now: datetime | None = None) -> Outlook:
    now = now or utcnow()
    start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    due_now = (
        session.scalar(
            select(func.count())
            .select_from(ReviewCard)
            .where(ReviewCard.learner_id == learner_id, ReviewCard.due <= now)
        )
        or 0
    )
    reviewed = (
        session.scalar(
            select(func.count())
            .select_from(ReviewLog)
            .where(ReviewLog.learner_id == learner_id, ReviewLog.reviewed_at >= start)
        )
        or 0
    )
    later_today = (
        session.scalar(
            select(func.count())
            .select_from(ReviewCard)
            .where(
                ReviewCard.learner_id == learner_id,
                ReviewCard.due > now,
                ReviewCard.due < start + timedelta(days=1),
            )
        )
        or 0
    )
    days = []
    for d in range(1, 8):
        lo, hi = start + timedelta(days=d), start + timedelta(days=d + 1)
        n = (
            session.scalar(
                select(func.count())
                .select_from(ReviewCard)
                .where(
                    ReviewCard.learner_id == learner_id, ReviewCard.due >= lo, ReviewCard.due < hi
                )
            )
            or 0
        )
        days.append((lo.date().isoformat(), n))
    return Outlook(
        due_now=due_now,
        reviewed_today=reviewed,
        limit=limit,
        by_day=days,
        later_today=later_today,
    )


def next_due(session: Session, learner_id: str, now: datetime | None = None) -> ReviewCard | None:
    now = now or utcnow()
    return session.scalar(
        select(ReviewCard)
        .where(ReviewCard.learner_id == learner_id, ReviewCard.due <= now)
        .order_by(ReviewCard.due)
        .limit(1)
    )
