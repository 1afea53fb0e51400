"""The exercise catalogue, for the web app and the worker alike: every folder under
``content/exercises/`` (and, in the tests, ``extra_exercise_content``), read with the
grading kit's loader, which imports no torch."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app import review
from app.db import Run, Submission
from app.runs.submissions import status_of
from app.settings import Settings
from labs.judge.kit import Exercise, load_all

# A Submit that ends in one of these sends the exercise's concepts to spaced review.
MISSED = ("failed", "timed_out")


def load_exercises(settings: Settings) -> dict[str, Exercise]:
    found: dict[str, Exercise] = {}
    for root in settings.exercise_roots:
        if (root / "exercises").is_dir():
            found.update(load_all(root))
    return found


def review_concepts(session: Session, learner: str, ex: Exercise, cat: Any) -> list[str]:
    """Put the quick checks of the exercise's concept cards into the learner's spaced
    review (the same queue as the quiz): a failed concept comes back. Returns the refs."""
    refs = []
    for slug in ex.concepts:
        term = cat.terms.get(slug)
        for item in (term.front.quiz if term else [])[:2]:
            ref = f"term:{slug}/{item.id}"
            review.get_or_create(session, learner, "quiz", ref)
            refs.append(ref)
    return refs


def review_a_missed_submit(
    session: Session, run: Run, sub: Submission, exercises: dict[str, Exercise], cat: Any
) -> list[str]:
    """When a Submit has failed its hidden cases (or timed out), its concepts come back in
    review, whichever way the learner reads the result (page or API); once, since review
    cards are made with get_or_create. Returns the refs (empty otherwise)."""
    ex = exercises.get(sub.exercise_id)
    if ex is None or sub.mode != "submit" or status_of(run, sub) not in MISSED:
        return []
    refs = review_concepts(session, sub.learner_id, ex, cat)
    session.commit()
    return refs
