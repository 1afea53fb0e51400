"""Dependency aliases that keep route signatures short."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlalchemy.orm import Session
from starlette.datastructures import FormData

from app.content import Catalogue
from app.db import Learner, Run, utcnow
from app.runs import store
from app.runs.catalog import LabCatalogue
from app.runs.queue import RunQueue
from app.settings import Settings
from labs.base import Lab

NO_SUCH_RUN = "No such run (or it is not yours)."


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_db(request: Request) -> Iterator[Session]:
    session: Session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        session.close()


def get_catalogue(request: Request) -> Catalogue:
    cat: Catalogue = request.app.state.content.get()
    return cat


def ensure_learner(session: Session, learner_id: str) -> Learner:
    learner = session.get(Learner, learner_id)
    if learner is None:
        learner = Learner(id=learner_id)
        session.add(learner)
        session.commit()
    return learner


def get_learner_id(request: Request, session: Session = Depends(get_db)) -> str:
    """The current learner's id; the learner row is created on first use."""
    learner_id: str = request.state.learner_id
    learner = ensure_learner(session, learner_id)
    if learner.merged_into:  # an anonymous id whose progress was claimed by an account
        return learner.merged_into
    if (utcnow() - learner.last_seen_at).total_seconds() > 300:
        learner.last_seen_at = utcnow()
        session.commit()
    return learner_id


async def get_form(request: Request) -> FormData:
    """The submitted form, read on the event loop so that the route itself can be a
    plain ``def`` running in the threadpool. An ``async def`` route that touches the
    database blocks the event loop while it waits for a pooled connection, and the
    connections come back only through other requests' clean-up on that same loop:
    under load every request then waits for the pool time-out (benchmarks/load.py
    found this with 200 learners)."""
    return await request.form()


def get_learner(request: Request, session: Session = Depends(get_db)) -> Learner:
    learner = session.get(Learner, get_learner_id(request, session))
    assert learner is not None
    return learner


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
    if run is None:
        raise HTTPException(404, NO_SUCH_RUN)
    return run


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
