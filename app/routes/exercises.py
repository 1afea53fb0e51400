"""Exercises: the JSON API for submissions and their event streams.

A learner sees only their own submissions: anyone else's answers 404. The pages
(catalogue, editor, result) are in ``app.routes.exercise_pages``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from app import routes
from app.db import Run
from app.deps import (
    CatalogueDep,
    ExerciseDep,
    ExercisesDep,
    LearnerDep,
    QueueDep,
    SessionDep,
    SettingsDep,
    SubmissionDep,
    anonymous_run_limit,
)
from app.exercises import review_a_missed_submit
from app.runs import submissions
from app.runs.live import SSE_HEADERS, After, Waiting, resume_from, stream
from app.runs.store import RunRefused
from app.runs.views import sse
from app.streams import SlotStreamingResponse, StreamSlot

router = routes.router(tags=["exercises"])


@router.get("/api/exercises")
def api_exercises(exercises: ExercisesDep) -> list[dict[str, Any]]:
    return [
        {"id": ex.id, "title": ex.title, "language": ex.language, "concepts": list(ex.concepts)}
        for ex in exercises.values()
    ]


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
            limit = anonymous_run_limit(request)
            return submissions.create(session, settings, queue, learner, ex.id, code, mode, limit)
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
def api_submission(
    found: SubmissionDep, session: SessionDep, exercises: ExercisesDep, cat: CatalogueDep
) -> dict[str, Any]:
    run, sub = found
    review_a_missed_submit(session, run, sub, exercises, cat)  # as the result page does
    return submissions.to_json(run, sub)


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
