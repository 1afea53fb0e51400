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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, CursorResult, and_, func, or_, select, update
from sqlalchemy.orm import Session

from app.db import Learner, Run, RunEvent, Worker, utcnow
from app.runs import cost
from app.runs.queue import RunQueue
from app.settings import Settings
from labs.base import Lab, LabParams, NeedsGPU

log = logging.getLogger("lowbit.runs")

ACTIVE_STATUSES = ("queued", "running")
# Queued runs of one lane the fair order looks at (the oldest; more wait their turn).
FAIR_WINDOW = 500
# How far back "served last" looks (seconds): after an hour every learner is new again.
SERVED_WINDOW_S = 3600.0
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
    stored = params.model_dump(mode="json")
    run = Run(
        learner_id=learner_id,
        lab_id=lab.id,
        status="queued",
        queue=lab.queue,
        params=stored,
        estimate_s=cost.estimate_seconds(lab.id, stored),
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
        queue.enqueue(run.id, run.queue, short=is_short(run.estimate_s, settings))
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


def is_short(estimate_s: float | None, settings: Settings) -> bool:
    """Whether a run with this estimate goes in the short lane (no estimate: long)."""
    return estimate_s is not None and estimate_s < settings.short_run_seconds


@dataclass(frozen=True)
class Queued:
    """What the fair order of queued runs looks at."""

    id: str
    learner_id: str
    created_at: datetime
    estimate_s: float | None


def fair_order(
    runs: Sequence[Queued],
    running: Mapping[str, int],
    last_started: Mapping[str, datetime | None] | None = None,
) -> list[Queued]:
    """Queued runs of one lane in the order workers take them: round-robin between
    learners. A run's turn is how many runs its learner has ahead of it (running, or
    queued before it); within a turn the learner served longest ago goes first
    (``last_started``: when each learner's latest run started; never: first), then
    the oldest run. So a learner with many runs queued gets one in each round, one
    with a run running waits for those with none, and one just served waits for
    those who were not."""
    last = last_started or {}
    seen: dict[str, int] = {}
    keyed = []
    for r in sorted(runs, key=lambda r: (r.created_at, r.id)):
        turn = running.get(r.learner_id, 0) + seen.get(r.learner_id, 0)
        seen[r.learner_id] = seen.get(r.learner_id, 0) + 1
        served = last.get(r.learner_id)
        keyed.append(((turn, served is not None, served or r.created_at, r.created_at, r.id), r))
    return [r for _, r in sorted(keyed, key=lambda kr: kr[0])]


def lane_filter(short: bool, settings: Settings) -> ColumnElement[bool]:
    if short:
        return Run.estimate_s < settings.short_run_seconds
    return or_(Run.estimate_s.is_(None), Run.estimate_s >= settings.short_run_seconds)


def queued_in_lane(
    session: Session, queue: str, short: bool, settings: Settings, limit: int = FAIR_WINDOW
) -> list[Queued]:
    """The oldest ``limit`` queued runs of one lane of ``queue``, in fair order."""
    rows = session.execute(
        select(Run.id, Run.learner_id, Run.created_at, Run.estimate_s)
        .where(Run.status == "queued", Run.queue == queue, lane_filter(short, settings))
        .order_by(Run.created_at, Run.id)
        .limit(limit)
    ).all()
    running = dict(
        session.execute(
            select(Run.learner_id, func.count())
            .where(Run.status == "running", Run.queue == queue)
            .group_by(Run.learner_id)
        ).all()
    )
    learners = {r.learner_id for r in rows}
    since = utcnow() - timedelta(seconds=SERVED_WINDOW_S)
    last_started = (
        dict(
            session.execute(
                select(Run.learner_id, func.max(Run.started_at))
                .where(Run.learner_id.in_(learners), Run.queue == queue, Run.started_at > since)
                .group_by(Run.learner_id)
            ).all()
        )
        if learners
        else {}
    )
    return fair_order([Queued(*r) for r in rows], running, last_started)


@dataclass(frozen=True)
class Place:
    """A queued run's place in its lane (1 = next) and the wait before it starts
    (seconds; None with no live worker to count on)."""

    position: int
    wait_s: float | None


def queue_place(session: Session, run: Run, settings: Settings) -> Place | None:
    """Where a queued run stands, in the order workers will take it; None unless
    queued. The wait adds the estimates of the runs ahead (for a long run, also what
    is left of the runs running and the short runs, which go first) and divides by
    the slots that take its lane."""
    if run.status != "queued":
        return None
    short = is_short(run.estimate_s, settings)
    order = queued_in_lane(session, run.queue, short, settings)
    ids = [q.id for q in order]
    position = ids.index(run.id) + 1 if run.id in ids else len(ids) + 1
    ahead = sum(q.estimate_s or 0.0 for q in order[: position - 1])
    workers = live_workers(session, run.queue, settings)
    slots = workers * settings.worker_concurrency
    if short and run.queue == "cpu":
        slots += workers * settings.short_lane_slots
    else:
        ahead += _left_running(session, run.queue)
        ahead += sum(
            q.estimate_s or 0.0 for q in queued_in_lane(session, run.queue, True, settings)
        )
    return Place(position, ahead / slots if slots else None)


def _left_running(session: Session, queue: str) -> float:
    """Seconds the running runs of ``queue`` should still take, by their estimates."""
    now = utcnow()
    rows = session.execute(
        select(Run.estimate_s, Run.started_at).where(Run.status == "running", Run.queue == queue)
    ).all()
    return sum(
        max(0.0, (est or 0.0) - (now - started).total_seconds()) if started else (est or 0.0)
        for est, started in rows
    )


def queue_position(session: Session, run: Run, settings: Settings) -> int | None:
    """The run's place in the order workers will take it (1 = next); None unless queued."""
    place = queue_place(session, run, settings)
    return place.position if place else None


def worker_is_live(settings: Settings) -> ColumnElement[bool]:
    """A worker that is up and has heartbeat within the reaper grace (the reaper
    marks the others lost)."""
    since = utcnow() - timedelta(seconds=settings.reaper_grace_seconds)
    return and_(Worker.status == "up", Worker.last_heartbeat >= since)


def live_workers(session: Session, queue: str, settings: Settings) -> int:
    """Live workers that take ``queue``."""
    rows = session.scalars(select(Worker.queues).where(worker_is_live(settings)))
    return sum(1 for queues in rows if queue in queues.split(","))


def run_json(run: Run, events: Sequence[RunEvent], place: Place | None = None) -> dict[str, Any]:
    """The API's view of a run (``GET /api/runs/{id}``); ``queue_position`` and
    ``queue_wait_s`` come from ``queue_place()`` while the run is queued, else None."""
    return {
        "id": run.id,
        "lab": run.lab_id,
        "status": run.status,
        "queue": run.queue,
        "queue_position": place.position if place else None,
        "queue_wait_s": round(place.wait_s, 1) if place and place.wait_s is not None else None,
        "estimate_s": run.estimate_s,
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
