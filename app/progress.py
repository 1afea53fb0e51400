"""What a learner has done, computed from the database and the catalogue."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from markupsafe import Markup
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.content import Catalogue
from app.content.quiz import AnswerError, grade
from app.db import PageVisit, QuizAttempt, ReviewLog, Run, insert_if_absent, utcnow


@dataclass
class Mastery:
    collection: str
    title: str
    answered: int
    correct: int
    total: int

    @property
    def percent(self) -> int:
        return round(100 * self.correct / self.total) if self.total else 0


@dataclass
class Progress:
    terms_read: int
    term_total: int
    depth_counts: dict[int, int]
    lessons_done: list[str]
    lesson_total: int
    runs_by_status: dict[str, int]
    mastery: list[Mastery]
    streak_days: int
    next_steps: list[tuple[str, str]] = field(default_factory=list)


def record_visit(session: Session, learner_id: str, kind: str, slug: str, detail: str = "") -> None:
    """Record a visit once; concurrent identical visits are not an error."""
    insert_if_absent(
        session,
        PageVisit,
        ["learner_id", "kind", "slug", "detail"],
        learner_id=learner_id,
        kind=kind,
        slug=slug,
        detail=detail,
        at=utcnow(),
    )
    session.commit()


def streak(session: Session, learner_id: str) -> int:
    """Consecutive days, ending today or yesterday, with at least one review."""
    since = utcnow() - timedelta(days=400)
    days = {
        d.date()
        for d in session.scalars(
            select(ReviewLog.reviewed_at).where(
                ReviewLog.learner_id == learner_id, ReviewLog.reviewed_at >= since
            )
        )
    }
    today = utcnow().date()
    day = today if today in days else today - timedelta(days=1)
    n = 0
    while day in days:
        n += 1
        day -= timedelta(days=1)
    return n


def compute(session: Session, cat: Catalogue, learner_id: str) -> Progress:
    visits = session.scalars(select(PageVisit).where(PageVisit.learner_id == learner_id)).all()
    read = {v.slug for v in visits if v.kind == "term" and v.slug in cat.terms}
    depth_counts: dict[int, int] = defaultdict(int)
    for v in visits:
        if v.kind == "term" and v.detail.isdigit():
            depth_counts[int(v.detail)] += 1
    done = [v.slug for v in visits if v.kind == "lesson-done" and v.slug in cat.lessons]
    runs = dict(
        session.execute(
            select(Run.status, func.count())
            .where(Run.learner_id == learner_id)
            .group_by(Run.status)
        ).all()  # type: ignore[arg-type]
    )
    latest: dict[tuple[str, str], bool | None] = {}
    for a in session.scalars(
        select(QuizAttempt).where(QuizAttempt.learner_id == learner_id).order_by(QuizAttempt.id)
    ):
        latest[(a.owner, a.item_id)] = a.correct if a.correct is not None else (a.rating or 0) >= 3
    mastery = []
    for cid, coll in cat.collections.items():
        items = [
            (f"term:{t.slug}", q.id)
            for t in cat.terms.values()
            if cid in t.front.collections
            for q in t.front.quiz
        ]
        answered = [latest[k] for k in items if k in latest]
        mastery.append(
            Mastery(cid, coll.title, len(answered), sum(1 for a in answered if a), len(items))
        )
    p = Progress(
        terms_read=len(read),
        term_total=len(cat.terms),
        depth_counts=dict(depth_counts),
        lessons_done=done,
        lesson_total=len(cat.lessons),
        runs_by_status=runs,
        mastery=mastery,
        streak_days=streak(session, learner_id),
    )
    nxt = next((lesson for lesson in cat.sorted_lessons() if lesson.slug not in done), None)
    if nxt:
        p.next_steps.append((f"/lessons/{nxt.slug}", f"Lesson {nxt.front.order}: {nxt.title}"))
    unread = next(
        (
            t
            for t in cat.sorted_terms()
            if t.slug not in read and "numerics-and-formats" in t.front.collections
        ),
        None,
    )
    if unread:
        p.next_steps.append((f"/terms/{unread.slug}", f"Read the card: {unread.title}"))
    p.next_steps.append(("/review", "Do today's review"))
    return p


@dataclass(frozen=True)
class Marks:
    """What one learner has done, for the marks beside each item of an index page."""

    terms_read: frozenset[str]
    lessons_seen: frozenset[str]
    lessons_done: frozenset[str]


def marks(session: Session, learner_id: str) -> Marks:
    rows = session.execute(
        select(PageVisit.kind, PageVisit.slug).where(PageVisit.learner_id == learner_id)
    ).all()
    by_kind: dict[str, set[str]] = defaultdict(set)
    for kind, slug in rows:
        by_kind[kind].add(slug)
    return Marks(
        frozenset(by_kind["term"]), frozenset(by_kind["lesson"]), frozenset(by_kind["lesson-done"])
    )


def last_answers(session: Session, learner_id: str, owner: str) -> dict[str, QuizAttempt]:
    """The learner's latest attempt at each quick-check item of ``owner`` ("term:x")."""
    latest: dict[str, QuizAttempt] = {}
    for a in session.scalars(
        select(QuizAttempt)
        .where(QuizAttempt.learner_id == learner_id, QuizAttempt.owner == owner)
        .order_by(QuizAttempt.id)
    ):
        latest[a.item_id] = a
    return latest


def answered_notes(items: Iterable[Any], attempts: dict[str, QuizAttempt]) -> dict[str, Markup]:
    """For each answered item, a line that says what the learner answered and how it
    was graded, shown above the item when its page is opened again."""
    notes: dict[str, Markup] = {}
    for item in items:
        attempt = attempts.get(item.id)
        if attempt is None:
            continue
        try:
            g = grade(item, attempt.answer or {})
        except AnswerError:  # the item changed since: its old answer no longer fits
            continue
        verdict = (
            "self-rated"
            if g.correct is None
            else ("correct" if g.correct else "not quite — the answer was " + g.expected)
        )
        cls = "" if g.correct is None else (" correct" if g.correct else " incorrect")
        notes[item.id] = Markup(
            '<p class="quiz-answered{}" role="status">You answered <q>{}</q>: {}. '
            "Answer again to practise.</p>"
        ).format(cls, g.given, verdict)
    return notes
