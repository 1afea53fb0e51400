"""Quick checks answered in place (htmx) or as a plain form post, and /review."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import HTTPException, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select
from starlette.datastructures import FormData

from app import notebook, review, routes
from app.content.quiz import (
    AnswerError,
    Numeric,
    QuizItemBase,
    SingleChoice,
    answer_record,
    grade,
)
from app.db import INT32_MAX, NotebookEntry, QuizAttempt, ReviewCard, Run, utcnow
from app.deps import CatalogueDep, FormDep, LearnerDep, SessionDep, SettingsDep
from app.runs.views import format_params
from app.templating import is_htmx, render
from labs.registry import get_lab

router = routes.router(tags=["quiz"])

DOUBLE_SUBMIT_WINDOW = timedelta(seconds=10)
# A review card id from the URL: out of the column's range is a 422, not a 500.
CardId = Annotated[int, Path(ge=1, le=INT32_MAX)]


def _lists(form: FormData) -> dict[str, list[str]]:
    return {k: [str(v) for v in form.getlist(k)] for k in form}


def _item(cat, owner: str, item_id: str) -> QuizItemBase:  # type: ignore[no-untyped-def]
    item = cat.quiz_item(owner, item_id)
    if item is None:
        raise HTTPException(
            404, "That quick-check question does not exist (it may have been removed)."
        )
    return item


def _owner_link(owner: str, item: QuizItemBase) -> str:
    kind, _, slug = owner.partition(":")
    return (
        f"/terms/{slug}?depth={item.depth}#depth-{item.depth}"
        if kind == "term"
        else f"/lessons/{slug}"
    )


@router.post("/quiz/{owner}/{item_id}", response_class=HTMLResponse)
def answer(
    request: Request,
    owner: str,
    item_id: str,
    cat: CatalogueDep,
    session: SessionDep,
    learner: LearnerDep,
    raw_form: FormDep,
) -> Response:
    item = _item(cat, owner, item_id)
    form = _lists(raw_form)
    ctx = {"item": item, "owner": owner, "link": _owner_link(owner, item)}
    try:
        g = grade(item, form)
    except AnswerError as e:
        # The same question back, the message beside what was typed. In place (htmx)
        # the form replaces itself, so the next answer replaces it again and no stale
        # message or second copy of the question is left; as a 200, since nothing failed
        # that the browser should log. A plain post gets the page with a 422.
        err = {**ctx, "error": str(e), "typed": form}
        if is_htmx(request):
            return render(request, "_quiz_item.html", err)
        return render(request, "quiz/feedback.html", err, status_code=422)
    record = answer_record(form)
    last = session.scalar(
        select(QuizAttempt)
        .where(
            QuizAttempt.learner_id == learner,
            QuizAttempt.owner == owner,
            QuizAttempt.item_id == item_id,
        )
        .order_by(QuizAttempt.id.desc())
        .limit(1)
    )
    duplicate = (
        last is not None
        and last.answer == record
        and utcnow() - last.created_at < DOUBLE_SUBMIT_WINDOW
    )
    if not duplicate:
        session.add(
            QuizAttempt(
                learner_id=learner, owner=owner, item_id=item_id, answer=record, correct=g.correct
            )
        )
        card = review.get_or_create(session, learner, "quiz", f"{owner}/{item_id}")
        if g.correct is not None and card.reps == 0:
            review.rate(session, card, 3 if g.correct else 1)
        session.commit()
    return render(request, "quiz/feedback.html", {**ctx, "grade": g}, block_name="feedback")


@router.post("/quiz/{owner}/{item_id}/rate", response_class=HTMLResponse)
def self_rate(
    request: Request,
    owner: str,
    item_id: str,
    cat: CatalogueDep,
    session: SessionDep,
    learner: LearnerDep,
    raw_form: FormDep,
) -> Response:
    """Self-grading of a free-text answer: again / hard / good / easy."""
    item = _item(cat, owner, item_id)
    form = _lists(raw_form)
    try:
        rating = int(form.get("rating", ["0"])[0])
        if rating not in review.RATINGS:
            raise ValueError
    except ValueError:
        raise HTTPException(422, "Rate with 1 (Again), 2 (Hard), 3 (Good) or 4 (Easy).") from None
    card = review.get_or_create(session, learner, "quiz", f"{owner}/{item_id}")
    if card.reps == 0:
        review.rate(session, card, rating)
    session.commit()
    return render(
        request,
        "quiz/rated.html",
        {"item": item, "rating": review.RATING_NAMES[rating], "due": card.due},
        block_name="rated",
    )


def _prediction_item(session, card: ReviewCard) -> tuple[QuizItemBase | None, str, str]:  # type: ignore[no-untyped-def]
    """A wrong prediction as a question about the idea it missed (the lab's concept,
    computed from the stored run: "which is larger, and why"); a lab without one asks
    for the number again."""
    entry = session.get(NotebookEntry, card.ref)
    if entry is None or entry.learner_id != card.learner_id or entry.prediction_correct is None:
        return None, "", ""
    run = session.get(Run, entry.run_id) if entry.run_id else None
    link = f"/runs/{entry.run_id}" if entry.run_id else "/notebook"
    lab = get_lab(entry.lab_id or "")
    concept = (
        lab.concept(run.result, entry.metric or "")
        if lab is not None and lab.concept is not None and run is not None and run.result
        else None
    )
    if concept is not None:
        item: QuizItemBase = SingleChoice(
            id="prediction",
            type="single",
            prompt=concept.prompt,
            choices=list(concept.choices),
            answer=concept.answer,
            explanation=concept.explanation,
            depth=1,
        )
        return item, f"prediction:{entry.id}", link
    if entry.actual_value is None:
        return None, "", ""
    shown = format_params(run.params if run else None)
    params = "its defaults" if shown == "defaults" else shown
    item = Numeric(
        id="prediction",
        type="numeric",
        prompt=(
            f"The {entry.lab_id} lab with {params}: what {notebook.output_label(entry.metric or 'value')} "
            f"does it report? You predicted {entry.predicted_value:,.6g} {entry.predicted_unit or ''} before running it."
        ),
        answer=entry.actual_value,
        tolerance=notebook.PREDICTION_TOLERANCE,
        unit=entry.predicted_unit or "",
        explanation=f"The run reported {entry.actual_value:,.6g} {entry.predicted_unit or ''}. "
        f"Your next step then: {entry.next_step or '(not written yet)'}",
        depth=1,
    )
    return item, f"prediction:{entry.id}", link


def _card_item(session, cat, card: ReviewCard) -> tuple[QuizItemBase | None, str, str]:  # type: ignore[no-untyped-def]
    """The question a review card asks: a quick-check item, or a wrong prediction
    turned into "what does this lab report?" (graded like a numeric item, ±10 %)."""
    if card.kind == "prediction":
        return _prediction_item(session, card)
    owner, _, item_id = card.ref.rpartition("/")
    item = cat.quiz_item(owner, item_id)
    return item, owner, _owner_link(owner, item) if item else ""


@router.get("/review", response_class=HTMLResponse)
def review_page(
    request: Request,
    cat: CatalogueDep,
    session: SessionDep,
    learner: LearnerDep,
    settings: SettingsDep,
) -> Response:
    look = review.outlook(session, learner, settings.review_daily_limit)
    card = review.next_due(session, learner) if look.remaining_today else None
    item = owner = None
    if card is not None:
        item, owner, _ = _card_item(session, cat, card)
        if item is None:  # the question or notebook entry is gone: retire its card
            session.delete(card)
            session.commit()
            return RedirectResponse("/review", status_code=303)
    return render(
        request,
        "quiz/review.html",
        {"look": look, "card": card, "item": item, "owner": owner},
        block_name="review",
    )


@router.post("/review/{card_id}/answer", response_class=HTMLResponse)
def review_answer(
    request: Request,
    card_id: CardId,
    cat: CatalogueDep,
    session: SessionDep,
    learner: LearnerDep,
    raw_form: FormDep,
) -> Response:
    card = session.get(ReviewCard, card_id)
    if card is None or card.learner_id != learner:
        raise HTTPException(404, "No such review card.")
    item, owner, link = _card_item(session, cat, card)
    if item is None:
        raise HTTPException(404, "That question no longer exists.")
    form = _lists(raw_form)
    ctx = {"card": card, "item": item, "owner": owner, "link": link}
    try:
        g = grade(item, form)
    except AnswerError as e:
        return render(
            request,
            "quiz/review_feedback.html",
            {**ctx, "error": str(e)},
            block_name="review",
            status_code=422,
        )
    suggested = 1 if g.correct is False else 3
    return render(
        request,
        "quiz/review_feedback.html",
        {**ctx, "grade": g, "suggested": suggested},
        block_name="review",
    )


@router.post("/review/{card_id}/rate")
def review_rate(
    request: Request, card_id: CardId, session: SessionDep, learner: LearnerDep, raw_form: FormDep
) -> Response:
    card = session.get(ReviewCard, card_id)
    if card is None or card.learner_id != learner:
        raise HTTPException(404, "No such review card.")
    form = _lists(raw_form)
    try:
        rating = int(form.get("rating", ["0"])[0])
    except ValueError:
        rating = 0
    if rating not in review.RATINGS:
        raise HTTPException(422, "Rate with 1 (Again), 2 (Hard), 3 (Good) or 4 (Easy).")
    if card.due <= utcnow():  # a double submission finds the card already moved on
        review.rate(session, card, rating)
        session.commit()
    headers = {"HX-Redirect": "/review"} if request.headers.get("HX-Request") else {}
    return RedirectResponse("/review", status_code=303, headers=headers)
