"""Dependency aliases that keep route signatures short.

A dependency that queries the database ends its transaction (``session.commit()``)
before it returns: FastAPI runs it and the route in different threads, and a
connection held between the two is one another thread cannot have
(tests/integration/test_burst.py fails if one is held)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlalchemy.orm import Session
from starlette.datastructures import FormData

from app.content import Catalogue
from app.db import Learner, Run, Submission, insert_if_absent, new_id, utcnow
from app.middleware import SAFE_METHODS
from app.runs import store, submissions
from app.runs.catalog import LabCatalogue
from app.runs.queue import RunQueue
from app.settings import Settings
from labs.base import Lab
from labs.judge.kit import Exercise

NO_SUCH_RUN = "No such run (or it is not yours)."


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_db(request: Request) -> AsyncIterator[Session]:
    """A database session for one request, closed on the event loop.

    Async on purpose: a sync generator dependency is closed in the threadpool, so
    under a burst every thread could be waiting for a pooled connection while the
    requests holding the connections wait for a thread to close them (a deadlock
    that lasted until the pool timed out). Closing returns the connection at once."""
    session: Session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        session.close()


def get_catalogue(request: Request) -> Catalogue:
    cat: Catalogue = request.app.state.content.get()
    return cat


def ensure_learner(session: Session, learner_id: str) -> Learner:
    """The learner row, inserted if missing. Idempotent under concurrency: two first
    requests of one new learner both succeed (``ON CONFLICT DO NOTHING``)."""
    learner = session.get(Learner, learner_id)
    if learner is None:
        now = utcnow()
        insert_if_absent(
            session,
            Learner,
            ["id"],
            id=learner_id,
            is_admin=False,
            created_at=now,
            last_seen_at=now,
        )
        session.commit()
        learner = session.get(Learner, learner_id)
        assert learner is not None
    return learner


def get_learner_id(request: Request, session: Session = Depends(get_db)) -> str:
    """The current learner's id.

    A read never writes: a visitor who only reads has no learner row (a client that
    drops cookies cannot fill the table). The row is created on the first unsafe
    request, within a per-client limit on new learners. An anonymous cookie whose
    learner has since become (or merged into) an account is not a key to that
    account: the browser gets a fresh anonymous learner instead."""
    try:
        learner_id = _learner_id(request, session)
    except BaseException:
        session.rollback()
        raise
    # End the transaction: its connection goes back to the pool now, not after the
    # route has waited for a thread of its own (under a burst, requests holding
    # connections while waiting for threads starved the requests in threads).
    session.commit()
    return learner_id


def _learner_id(request: Request, session: Session) -> str:
    state = request.state
    error = getattr(state, "identity_error", None)
    if error is not None:
        raise error
    learner_id: str = state.learner_id
    if state.signed_in:
        return learner_id
    learner = session.get(Learner, learner_id)
    if learner is not None and (learner.username or learner.merged_into):
        learner_id = new_id()
        state.learner_id = learner_id
        state.session_data = {"l": learner_id}
        learner = None
    if request.method in SAFE_METHODS:
        return learner_id
    if learner is None:
        request.app.state.limiter.hit(request.app.state.limiter.new_learner, state.client_key)
        ensure_learner(session, learner_id)
    elif (utcnow() - learner.last_seen_at).total_seconds() > 300:
        learner.last_seen_at = utcnow()
        session.commit()
    return learner_id


def anonymous_run_limit(request: Request) -> Callable[[], None] | None:
    """For an anonymous learner, the per-client limit on starting runs: each new
    cookie is a new learner with a quota of its own, so the client is limited too."""
    if request.state.signed_in:
        return None
    limiter = request.app.state.limiter
    client = request.state.client_key
    return lambda: limiter.hit(limiter.anonymous_run, client)


async def get_form(request: Request) -> FormData:
    """The submitted form, read on the event loop so that the route itself can be a
    plain ``def`` running in the threadpool. An ``async def`` route that touches the
    database blocks the event loop while it waits for a pooled connection, and the
    connections come back only through other requests' clean-up on that same loop:
    under load every request then waits for the pool time-out (benchmarks/load.py
    found this with 200 learners)."""
    return await request.form()


def get_learner(request: Request, session: Session = Depends(get_db)) -> Learner:
    """The learner row; for a reader who has none yet, an unsaved blank one."""
    learner_id = get_learner_id(request, session)
    learner = session.get(Learner, learner_id)
    session.commit()  # as in get_learner_id: hold no connection between threads
    return learner if learner is not None else Learner(id=learner_id, is_admin=False)


def get_labs(request: Request) -> LabCatalogue:
    """The labs this app offers (``create_app`` builds the catalogue)."""
    labs: LabCatalogue = request.app.state.labs
    return labs


def get_run_queue(request: Request) -> RunQueue:
    """The app's queue client (``create_app`` builds it)."""
    queue: RunQueue = request.app.state.run_queue
    return queue


def get_path_lab(lab_id: str, request: Request, labs: LabCatalogue = Depends(get_labs)) -> Lab:
    """The lab named by the ``{lab_id}`` path parameter; 404 if this app has none."""
    lab = labs.get(lab_id)
    if lab is None:
        if request.url.path.startswith("/api/"):
            raise HTTPException(404, f"No lab {lab_id!r}. GET /api/labs lists them.")
        raise HTTPException(404, f"There is no lab called {lab_id!r}.")
    return lab


def get_own_run(
    run_id: str, session: Session = Depends(get_db), learner: str = Depends(get_learner_id)
) -> Run:
    """The run named by the ``{run_id}`` path parameter if it is the learner's; anyone
    else's, like a missing one, answers 404."""
    run = store.get_run(session, run_id, learner)
    # As in get_learner_id: end the transaction so no connection is held while the
    # route waits for a thread (the run's loaded attributes stay readable).
    session.commit()
    if run is None:
        raise HTTPException(404, NO_SUCH_RUN)
    return run


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
    submission_id: str, session: Session = Depends(get_db), learner: str = Depends(get_learner_id)
) -> tuple[Run, Submission]:
    found = submissions.get(session, submission_id, learner)
    session.commit()  # hold no connection while the route waits for a thread
    if found is None:
        raise HTTPException(404, NO_SUCH_SUBMISSION)
    return found


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_db)]
CatalogueDep = Annotated[Catalogue, Depends(get_catalogue)]
LearnerDep = Annotated[str, Depends(get_learner_id)]
LearnerRowDep = Annotated[Learner, Depends(get_learner)]
FormDep = Annotated[FormData, Depends(get_form)]
LabsDep = Annotated[LabCatalogue, Depends(get_labs)]
QueueDep = Annotated[RunQueue, Depends(get_run_queue)]
LabDep = Annotated[Lab, Depends(get_path_lab)]
RunDep = Annotated[Run, Depends(get_own_run)]
ExercisesDep = Annotated[dict[str, Exercise], Depends(get_exercises)]
ExerciseDep = Annotated[Exercise, Depends(get_path_exercise)]
SubmissionDep = Annotated[tuple[Run, Submission], Depends(get_own_submission)]
