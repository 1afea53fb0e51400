"""Run records, the learner's side: creation with quotas, reads, cancel, queue places.

Every state change is one conditional UPDATE, so two workers, a reaper and a
learner pressing "cancel" can race without a run ending up in two states:

    queued ──claim──▶ running ──finish──▶ succeeded | failed | timed_out | cancelled
      ▲                  │
      └──reaper (heartbeat older than the grace, attempts left)──┘
    queued ──cancel──▶ cancelled          running ──reaper, no attempts left──▶ failed

The worker's writes (claim, events, finish, heartbeats, the reaper) are in
``app.runs.claims``. Imports no torch: the web process uses this module.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, CursorResult, and_, func, select, update
from sqlalchemy.orm import Session

from app.db import Learner, Run, RunEvent, Worker, utcnow
from app.runs.queue import RunQueue
from app.settings import Settings
from labs.base import Lab, LabParams, NeedsGPU

log = logging.getLogger("lowbit.runs")

ACTIVE_STATUSES = ("queued", "running")
CANCELLED_ERROR = "Cancelled by the learner."


class RunRefused(Exception):
    """The learner may not start this run now; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def changed_rows(session: Session, statement: Any) -> int:
    """Rows an UPDATE changed: how every state change knows whether it won."""
    result: CursorResult[Any] = session.execute(statement)  # type: ignore[assignment]
    return int(result.rowcount)


def _start_of_utc_day(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def check_quotas(session: Session, settings: Settings, learner_id: str, gpu: bool) -> datetime:
    """Lock the learner's row and raise ``RunRefused`` if one more run (lab run or
    exercise submission alike) is over a quota; returns the time of the check.

    The caller inserts its run in the same transaction and commits it.
    """
    session.commit()  # end any read transaction so the lock below is the first statement
    now = utcnow()
    # Locks the learner's row (a row lock on PostgreSQL, the write lock on SQLite)
    # so two simultaneous requests cannot both pass the quota checks.
    session.execute(update(Learner).where(Learner.id == learner_id).values(last_seen_at=now))
    learner = session.get(Learner, learner_id)
    mine = select(func.count()).select_from(Run).where(Run.learner_id == learner_id)
    active = session.scalar(mine.where(Run.status.in_(ACTIVE_STATUSES))) or 0
    if active >= settings.max_active_runs:
        session.rollback()
        raise RunRefused(
            429,
            f"You already have {active} runs queued or running; the limit is "
            f"{settings.max_active_runs}. Wait for one to finish or cancel it, then start this one.",
        )
    today = session.scalar(mine.where(Run.created_at >= _start_of_utc_day(now))) or 0
    if today >= settings.daily_run_quota:
        session.rollback()
        raise RunRefused(
            429,
            f"You have started {today} runs today, the daily limit. "
            "The quota resets at midnight UTC.",
        )
    if gpu:
        if settings.gpu_labs_require_account and (learner is None or learner.username is None):
            session.rollback()
            raise RunRefused(403, "GPU labs need an account: sign in, then start the run again.")
        gpu_today = (
            session.scalar(mine.where(Run.queue == "gpu", Run.created_at >= _start_of_utc_day(now)))
            or 0
        )
        if gpu_today >= settings.daily_gpu_quota:
            session.rollback()
            raise RunRefused(
                429,
                f"You have started {gpu_today} GPU runs today, the daily GPU limit. "
                "It resets at midnight UTC; CPU labs stay available.",
            )
    return now


def create_run(
    session: Session, settings: Settings, learner_id: str, lab: Lab, params: LabParams
) -> Run:
    """Insert a ``queued`` run after checking the learner's quotas; raises ``RunRefused``.

    The caller enqueues the id after this commits (``RunQueue.enqueue``); if that
    enqueue is lost, the reaper finds the queued run and enqueues it again.
    """
    now = check_quotas(session, settings, learner_id, lab.needs_gpu is NeedsGPU.required)
    run = Run(
        learner_id=learner_id,
        lab_id=lab.id,
        status="queued",
        queue=lab.queue,
        params=params.model_dump(mode="json"),
        created_at=now,
    )
    session.add(run)
    session.commit()
    return run


def submit(
    session: Session,
    settings: Settings,
    queue: RunQueue,
    learner_id: str,
    lab: Lab,
    params: LabParams,
) -> Run:
    """``create_run`` then enqueue; a failed enqueue is logged and left to the reaper."""
    run = create_run(session, settings, learner_id, lab, params)
    try:
        queue.enqueue(run.id, run.queue)
    except Exception:  # the run is safe in the database; the reaper enqueues it later
        log.exception("enqueue failed; the reaper will retry", extra={"run": run.id})
    return run


def get_run(session: Session, run_id: str, learner_id: str) -> Run | None:
    """The run if it belongs to ``learner_id``; None otherwise (callers answer 404)."""
    run = session.get(Run, run_id)
    if run is None or run.learner_id != learner_id:
        return None
    return run


def list_runs(
    session: Session, learner_id: str, lab_id: str | None = None, limit: int = 50
) -> list[Run]:
    q = select(Run).where(Run.learner_id == learner_id, Run.kind == "lab")
    if lab_id:
        q = q.where(Run.lab_id == lab_id)
    return list(session.scalars(q.order_by(Run.created_at.desc()).limit(limit)))


def events_after(session: Session, run_id: str, after_seq: int = 0) -> list[RunEvent]:
    q = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.seq > after_seq)
    return list(session.scalars(q.order_by(RunEvent.seq)))


def cancel_run(session: Session, run_id: str, learner_id: str) -> Run | None:
    """Cancel a queued run now, or ask the worker to stop a running one. None if not found."""
    now = utcnow()
    mine = (Run.id == run_id, Run.learner_id == learner_id)
    done = changed_rows(
        session,
        update(Run)
        .where(*mine, Run.status == "queued")
        .values(status="cancelled", error=CANCELLED_ERROR, finished_at=now),
    )
    if not done:
        session.execute(
            update(Run).where(*mine, Run.status == "running").values(cancel_requested=True)
        )
    session.commit()
    run = get_run(session, run_id, learner_id)
    if run is not None:
        session.refresh(run)
    return run


def queue_position(session: Session, run: Run) -> int | None:
    """The run's place among the queued runs of its queue (1 = next), by creation
    time with ties by id; None unless the run is queued.

    Workers take messages in enqueue order, which is creation order except for a
    run re-queued after its worker was lost: that one counts from its creation
    time here, so the number is what a learner waits behind, not an exact turn.
    """
    if run.status != "queued":
        return None
    ahead = session.scalar(
        select(func.count())
        .select_from(Run)
        .where(
            Run.queue == run.queue,
            Run.status == "queued",
            (Run.created_at < run.created_at)
            | ((Run.created_at == run.created_at) & (Run.id < run.id)),
        )
    )
    return int(ahead or 0) + 1


def worker_is_live(settings: Settings) -> ColumnElement[bool]:
    """A worker that is up and has heartbeat within the reaper grace (the reaper
    marks the others lost)."""
    since = utcnow() - timedelta(seconds=settings.reaper_grace_seconds)
    return and_(Worker.status == "up", Worker.last_heartbeat >= since)


def live_workers(session: Session, queue: str, settings: Settings) -> int:
    """Live workers that take ``queue``."""
    rows = session.scalars(select(Worker.queues).where(worker_is_live(settings)))
    return sum(1 for queues in rows if queue in queues.split(","))


def run_json(run: Run, events: Sequence[RunEvent], position: int | None = None) -> dict[str, Any]:
    """The API's view of a run (``GET /api/runs/{id}``); ``queue_position`` is
    ``queue_position()`` while the run is queued, else None."""
    return {
        "id": run.id,
        "lab": run.lab_id,
        "status": run.status,
        "queue": run.queue,
        "queue_position": position,
        "params": run.params,
        "events": [event_json(e) for e in events],
        "result": run.result,
        "error": run.error,
        "environment": run.environment or {},
        "sandbox": run.sandbox or {},
        "attempts": run.attempts,
        "created_at": run.created_at.isoformat() if run.created_at else None,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "duration_s": run.duration_s,
    }


def event_json(e: RunEvent) -> dict[str, Any]:
    return {"seq": e.seq, "kind": e.kind, "data": e.data}
