"""Exercises: the JSON API for submissions and their event streams.

A learner sees only their own submissions: anyone else's answers 404. The pages
(catalogue, editor, result) are in ``app.routes.exercise_pages``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import anyio
from fastapi import Depends, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse
from sqlalchemy.orm import Session

from app import routes
from app.db import Run, Submission
from app.deps import (
    LearnerDep,
    QueueDep,
    SessionDep,
    SettingsDep,
    anonymous_run_limit,
)
from app.runs import submissions
from app.runs.live import SSE_HEADERS, After, Waiting, resume_from, stream
from app.runs.queue import RunQueue
from app.runs.store import RunRefused
from app.runs.views import sse
from app.settings import Settings
from app.streams import SlotStreamingResponse, StreamSlot
from labs.judge.kit import Exercise

router = routes.router(tags=["exercises"])

NO_SUCH_SUBMISSION = "No such submission (or it is not yours)."


def get_exercises(request: Request) -> dict[str, Exercise]:
    found: dict[str, Exercise] = request.app.state.exercises
    return found


def get_path_exercise(
    exercise_id: str, request: Request, exercises: dict[str, Exercise] = Depends(get_exercises)
) -> Exercise:
    ex = exercises.get(exercise_id)
    if ex is None:
        if request.url.path.startswith("/api/"):
            raise HTTPException(404, f"No exercise {exercise_id!r}. GET /api/exercises lists them.")
        raise HTTPException(404, f"There is no exercise called {exercise_id!r}.")
    return ex


def get_own_submission(
    submission_id: str, session: SessionDep, learner: LearnerDep
) -> tuple[Run, Submission]:
    found = submissions.get(session, submission_id, learner)
    session.commit()  # hold no connection while the route waits for a thread
    if found is None:
        raise HTTPException(404, NO_SUCH_SUBMISSION)
    return found


ExercisesDep = Annotated[dict[str, Exercise], Depends(get_exercises)]
ExerciseDep = Annotated[Exercise, Depends(get_path_exercise)]
SubmissionDep = Annotated[tuple[Run, Submission], Depends(get_own_submission)]


@router.get("/api/exercises")
def api_exercises(exercises: ExercisesDep) -> list[dict[str, Any]]:
    return [
        {"id": ex.id, "title": ex.title, "language": ex.language, "concepts": list(ex.concepts)}
        for ex in exercises.values()
    ]


def start_submission(
    request: Request,
    session: Session,
    settings: Settings,
    queue: RunQueue,
    learner: str,
    ex: Exercise,
    code: str,
    mode: str,
) -> Run:
    """Create and enqueue a submission; ``RunRefused`` for 422/429 (both routes use it)."""
    limit = anonymous_run_limit(request)
    if limit is not None:
        limit()
    return submissions.create(session, settings, queue, learner, ex.id, code, mode)


@router.post("/api/exercises/{exercise_id}/submissions", status_code=202)
async def api_submit(
    ex: ExerciseDep,
    request: Request,
    settings: SettingsDep,
    queue: QueueDep,
    learner: LearnerDep,
    session: SessionDep,
) -> JSONResponse:
    body = await request.body()

    def parse_and_start() -> Run:
        try:
            code, mode = submissions.parse_request(body)
            return start_submission(request, session, settings, queue, learner, ex, code, mode)
        finally:
            session.close()

    try:
        run = await anyio.to_thread.run_sync(parse_and_start)
    except RunRefused as e:
        return JSONResponse({"detail": e.message}, status_code=e.status)
    return JSONResponse(
        {"id": run.id, "status": "queued", "url": f"/api/submissions/{run.id}"}, status_code=202
    )


@router.get("/api/submissions/{submission_id}")
def api_submission(found: SubmissionDep) -> dict[str, Any]:
    return submissions.to_json(*found)


@router.get("/api/submissions/{submission_id}/events")
def api_submission_events(
    slot: StreamSlot, found: SubmissionDep, request: Request, after: After = 0
) -> StreamingResponse:
    """``text/event-stream``: ``event: status`` on each status change and a final
    ``event: end`` with the whole submission (as ``GET /api/submissions/{id}``)."""
    run, _ = found
    factory = request.app.state.sessionmaker
    learner = run.learner_id

    def status(r: Run, waiting: Waiting | None) -> str:
        place = waiting.position if waiting else None
        return sse("status", json.dumps({"status": r.status, "queue_position": place}))

    def end(r: Run) -> str:
        with factory() as s:
            got = submissions.get(s, r.id, learner)
            data = submissions.to_json(*got) if got else {"status": "error"}
        return sse("end", json.dumps(data))

    return SlotStreamingResponse(
        stream(request, run.id, resume_from(request, after), lambda e: None, status, end),
        slot,
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )
