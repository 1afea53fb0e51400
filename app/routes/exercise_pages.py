"""Exercise pages: the catalogue (grouped by concept, with done marks), the editor
page, the form POST that submits, the result page, hints, giving up and drafts.

Everything works without JavaScript: the editor is a ``<textarea>`` in a form whose
POST answers 303 to the result page, which refreshes itself until the verdict is in.
With htmx the result swaps in below the editor and polls as a fragment; CodeMirror
(static/vendor/editor.js) replaces the textarea where scripts run.
"""

from __future__ import annotations

import difflib
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app import routes
from app.content.markdown import render_markdown
from app.db import ExerciseState, Run, Submission, utcnow
from app.deps import (
    CatalogueDep,
    ExerciseDep,
    ExercisesDep,
    FormDep,
    LearnerDep,
    QueueDep,
    SessionDep,
    SettingsDep,
    SubmissionDep,
    anonymous_run_limit,
)
from app.exercises import review_a_missed_submit, review_concepts
from app.runs import submissions
from app.runs.store import RunRefused
from app.templating import is_htmx, render
from labs.judge.kit import Exercise

router = routes.router(tags=["exercise pages"])

LANGUAGES = {"python": "Python", "triton": "Triton (runs under its interpreter on CPU)"}


def _states(session: Session, learner: str) -> dict[str, ExerciseState]:
    rows = session.query(ExerciseState).filter(ExerciseState.learner_id == learner).all()
    return {r.exercise_id: r for r in rows}


@router.get("/exercises", response_class=HTMLResponse)
def exercises_index(
    request: Request,
    exercises: ExercisesDep,
    cat: CatalogueDep,
    session: SessionDep,
    learner: LearnerDep,
) -> HTMLResponse:
    states = _states(session, learner)
    groups: dict[str, list[Exercise]] = {}
    for ex in exercises.values():
        groups.setdefault(ex.concepts[0], []).append(ex)
    terms = {slug: t.front.title for slug, t in cat.terms.items()}
    ordered = sorted(groups.items(), key=lambda kv: terms.get(kv[0], kv[0]).lower())
    return render(
        request,
        "exercises/index.html",
        {"groups": ordered, "terms": terms, "states": states, "languages": LANGUAGES},
    )


def _page_context(
    session: Session, learner: str, ex: Exercise, cat: Any, code: str | None = None
) -> dict[str, Any]:
    st = submissions.state(session, learner, ex.id)
    history = submissions.history(session, learner, ex.id)
    solved = st is not None and st.passed_at is not None
    gave_up = st is not None and st.gave_up_at is not None
    shown = min(st.hints_shown if st else 0, len(ex.hints))
    return {
        "ex": ex,
        "task_html": render_markdown(ex.body),
        "code": code if code is not None else (st.draft if st and st.draft else ex.starter),
        "hints": ex.hints[:shown],
        "more_hints": shown < len(ex.hints),
        "solution": ex.solution if (solved or gave_up) else None,
        "solved": solved,
        "gave_up": gave_up,
        "history": history,
        "terms": {slug: cat.terms[slug].front.title for slug in ex.concepts if slug in cat.terms},
        "language": LANGUAGES.get(ex.language, ex.language),
    }


@router.get("/exercises/{exercise_id}", response_class=HTMLResponse)
def exercise_page(
    ex: ExerciseDep, request: Request, session: SessionDep, learner: LearnerDep, cat: CatalogueDep
) -> HTMLResponse:
    return render(request, "exercises/exercise.html", _page_context(session, learner, ex, cat))


@router.post("/exercises/{exercise_id}/submissions", response_model=None)
def exercise_submit(
    ex: ExerciseDep,
    request: Request,
    form: FormDep,
    session: SessionDep,
    settings: SettingsDep,
    queue: QueueDep,
    learner: LearnerDep,
    cat: CatalogueDep,
) -> Response:
    raw = form.get("code", "")
    code = raw.replace("\r\n", "\n") if isinstance(raw, str) else ""
    try:
        mode = submissions.check_mode(form.get("mode", "examples"))
        code = submissions.check_code(code)
        limit = anonymous_run_limit(request)
        run = submissions.create(session, settings, queue, learner, ex.id, code, mode, limit)
    except RunRefused as e:
        ctx = _page_context(session, learner, ex, cat, code=code) | {"form_error": e.message}
        if is_htmx(request):
            return render(request, "exercises/_refused.html", ctx, status_code=e.status)
        return render(request, "exercises/exercise.html", ctx, status_code=e.status)
    if is_htmx(request):
        return _result(request, session, run.id, learner)
    return RedirectResponse(f"/submissions/{run.id}", status_code=303)


def _result(request: Request, session: Session, submission_id: str, learner: str) -> HTMLResponse:
    found = submissions.get(session, submission_id, learner)
    if found is None:
        raise HTTPException(404, "No such submission (or it is not yours).")
    run, sub = found
    return render(
        request,
        "exercises/submission.html",
        _result_context(session, run, sub),
        block_name="result",
    )


def _result_context(
    session: Session, run: Run, sub: Submission, reviewing: list[str] | None = None
) -> dict[str, Any]:
    data = submissions.to_json(run, sub)
    previous = (
        session.query(Submission)
        .filter(
            Submission.learner_id == sub.learner_id,
            Submission.exercise_id == sub.exercise_id,
            Submission.created_at < sub.created_at,
        )
        .order_by(Submission.created_at.desc())
        .first()
    )
    diff = None
    if previous is not None and previous.code != sub.code:
        diff = "".join(
            difflib.unified_diff(
                previous.code.splitlines(keepends=True),
                sub.code.splitlines(keepends=True),
                "previous attempt",
                "this attempt",
            )
        )
    return {
        "sub": sub,
        "s": data,
        "final": run.is_final,
        "stopping": run.cancel_requested,
        "diff": diff,
        "reviewing": reviewing,
    }


@router.get("/submissions/{submission_id}", response_class=HTMLResponse)
def submission_page(
    found: SubmissionDep,
    request: Request,
    session: SessionDep,
    exercises: ExercisesDep,
    cat: CatalogueDep,
) -> HTMLResponse:
    run, sub = found
    reviewing = review_a_missed_submit(session, run, sub, exercises, cat)
    ctx = _result_context(session, run, sub, reviewing)
    return render(request, "exercises/submission.html", ctx, block_name="result")


@router.post("/exercises/{exercise_id}/hints", response_model=None)
def exercise_hint(
    ex: ExerciseDep, request: Request, form: FormDep, session: SessionDep, learner: LearnerDep
) -> Response:
    """Unlock the next hint (one per press)."""
    st = submissions.state(session, learner, ex.id, create=True)
    assert st is not None
    st.hints_shown = min(len(ex.hints), (st.hints_shown or 0) + 1)
    st.updated_at = utcnow()
    session.commit()
    return RedirectResponse(f"/exercises/{ex.id}#hints", status_code=303)


@router.post("/exercises/{exercise_id}/give-up", response_model=None)
def exercise_give_up(
    ex: ExerciseDep,
    request: Request,
    form: FormDep,
    session: SessionDep,
    learner: LearnerDep,
    cat: CatalogueDep,
) -> Response:
    """Show the reference solution; the exercise's concepts come back for review."""
    st = submissions.state(session, learner, ex.id, create=True)
    assert st is not None
    if st.gave_up_at is None:
        st.gave_up_at = utcnow()
        review_concepts(session, learner, ex, cat)
    session.commit()
    return RedirectResponse(f"/exercises/{ex.id}#solution", status_code=303)


@router.post("/exercises/{exercise_id}/draft", status_code=204, response_model=None)
def exercise_draft(
    ex: ExerciseDep, form: FormDep, session: SessionDep, learner: LearnerDep
) -> Response:
    """Keep the editor's text (the editor saves it as the learner types)."""
    raw = form.get("code", "")
    try:
        code = submissions.check_code(raw if isinstance(raw, str) else "")
    except RunRefused as e:
        return Response(e.message, status_code=e.status)
    submissions.save_draft(session, learner, ex.id, code)
    session.commit()
    return Response(status_code=204)
