"""/progress for every learner, /admin for admin accounts (read-only)."""

from __future__ import annotations

from datetime import timedelta

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import func, select

from app import progress, routes
from app.db import Learner, Run, Worker, utcnow
from app.deps import CatalogueDep, FormDep, LearnerDep, LearnerRowDep, SessionDep, SettingsDep
from app.review import outlook
from app.templating import render

router = routes.router(tags=["progress"])
VISIT_KINDS = {"term", "lesson", "lesson-done"}


@router.post("/progress/seen")
def seen(
    request: Request, session: SessionDep, learner: LearnerDep, cat: CatalogueDep, form: FormDep
) -> Response:
    """Called by the page after it loads (htmx), so plain GETs stay read-only."""
    kind, slug, detail = (str(form.get(k, ""))[:120] for k in ("kind", "slug", "detail"))
    known = slug in cat.terms if kind == "term" else slug in cat.lessons
    if kind not in VISIT_KINDS or not known or (detail and not detail.isdigit()):
        raise HTTPException(422, "Unknown page.")
    progress.record_visit(session, learner, kind, slug, detail)
    if kind == "lesson-done":
        if not request.headers.get("HX-Request"):
            return RedirectResponse(f"/lessons/{slug}", status_code=303)
        return HTMLResponse(
            '<p class="note" role="status">Lesson marked complete. See <a href="/progress">your progress</a>.</p>'
        )
    return Response(status_code=204)


@router.get("/progress", response_class=HTMLResponse)
def progress_page(
    request: Request,
    session: SessionDep,
    cat: CatalogueDep,
    learner: LearnerRowDep,
    settings: SettingsDep,
) -> Response:
    p = progress.compute(session, cat, learner.id)
    look = outlook(session, learner.id, settings.review_daily_limit)
    return render(request, "progress.html", {"p": p, "look": look, "me": learner})


@router.get("/admin", response_class=HTMLResponse)
def admin_page(
    request: Request, session: SessionDep, learner: LearnerRowDep, settings: SettingsDep
) -> Response:
    if not learner.is_admin:
        raise HTTPException(404, "Not found.")
    since = utcnow() - timedelta(hours=24)
    queued = dict(
        session.execute(
            select(Run.queue, func.count()).where(Run.status == "queued").group_by(Run.queue)
        ).all()
    )  # type: ignore[arg-type]
    by_status = dict(
        session.execute(
            select(Run.status, func.count()).where(Run.created_at >= since).group_by(Run.status)
        ).all()
    )  # type: ignore[arg-type]
    workers = session.scalars(select(Worker).order_by(Worker.last_heartbeat.desc()).limit(50)).all()
    recent = session.scalars(select(Run).order_by(Run.created_at.desc()).limit(25)).all()
    learners = (
        session.scalar(
            select(func.count()).select_from(Learner).where(Learner.merged_into.is_(None))
        )
        or 0
    )
    accounts = (
        session.scalar(
            select(func.count()).select_from(Learner).where(Learner.username.is_not(None))
        )
        or 0
    )
    stale = utcnow() - timedelta(seconds=settings.reaper_grace_seconds)
    return render(
        request,
        "admin.html",
        {
            "queued": queued,
            "by_status": by_status,
            "workers": workers,
            "recent": recent,
            "learners": learners,
            "accounts": accounts,
            "stale": stale,
        },
    )
