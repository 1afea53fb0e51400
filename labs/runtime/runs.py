"""Run records: creation with quotas, cancel, claim, events, heartbeats, the reaper.

Every state change is one conditional UPDATE, so two workers, a reaper and a
learner pressing "cancel" can race without a run ending up in two states:

    queued ──claim──▶ running ──finish──▶ succeeded | failed | timed_out | cancelled
      ▲                  │
      └──reaper (heartbeat older than the grace, attempts left)──┘
    queued ──cancel──▶ cancelled          running ──reaper, no attempts left──▶ failed

Imports no torch: the web process uses this module.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, CursorResult, and_, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.db import FINAL_STATUSES, Learner, Run, RunEvent, Worker, utcnow
from app.settings import Settings
from labs.base import Lab, LabParams, NeedsGPU
from labs.runtime.queue import RunQueue

log = logging.getLogger("lowbit.runs")

ACTIVE_STATUSES = ("queued", "running")
# A queued run younger than this may not have reached the queue yet (the web
# process inserts, commits, then enqueues): the reaper leaves it alone.
LOST_QUEUED_MIN_AGE_S = 5.0

WORKER_LOST_ERROR = (
    "worker lost: the worker running this lab stopped responding after {attempts} attempt(s). "
    "Start the run again; if it keeps happening, tell the site's operators."
)
CANCELLED_ERROR = "Cancelled by the learner."


class RunRefused(Exception):
    """The learner may not start this run now; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _changed(session: Session, statement: Any) -> int:
    """Rows an UPDATE changed: how every state change below knows whether it won."""
    result: CursorResult[Any] = session.execute(statement)  # type: ignore[assignment]
    return int(result.rowcount)


def _start_of_utc_day(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def create_run(
    session: Session, settings: Settings, learner_id: str, lab: Lab, params: LabParams
) -> Run:
    """Insert a ``queued`` run after checking the learner's quotas; raises ``RunRefused``.

    The caller enqueues the id after this commits (``RunQueue.enqueue``); if that
    enqueue is lost, the reaper finds the queued run and enqueues it again.
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
    if lab.needs_gpu is NeedsGPU.required:
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
    q = select(Run).where(Run.learner_id == learner_id)
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
    done = _changed(
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


# ----------------------------------------------------------------------------
# Worker side
# ----------------------------------------------------------------------------


def claim(factory: sessionmaker[Session], run_id: str, worker_id: str) -> Run | None:
    """Take a queued run for ``worker_id``; None if it is not queued (duplicate message,
    cancelled, or already taken)."""
    now = utcnow()
    with factory() as s:
        taken = _changed(
            s,
            update(Run)
            .where(Run.id == run_id, Run.status == "queued")
            .values(
                status="running",
                worker_id=worker_id,
                attempts=Run.attempts + 1,
                started_at=now,
                heartbeat_at=now,
            ),
        )
        s.commit()
        return s.get(Run, run_id) if taken else None


def append_events(
    factory: sessionmaker[Session],
    run_id: str,
    worker_id: str,
    events: Iterable[tuple[str, dict[str, Any]]],
) -> bool:
    """Store ``events`` with consecutive ``seq`` numbers; False if this worker no longer
    owns the run (the reaper gave it away, or it ended): the caller stops the lab."""
    batch = list(events)
    now = utcnow()
    with factory() as s:
        owned = _changed(
            s,
            update(Run)
            .where(Run.id == run_id, Run.worker_id == worker_id, Run.status == "running")
            .values(event_count=Run.event_count + len(batch), heartbeat_at=now),
        )
        if not owned:
            s.rollback()
            return False
        last = s.scalar(select(Run.event_count).where(Run.id == run_id)) or 0
        first = last - len(batch) + 1
        s.add_all(
            RunEvent(run_id=run_id, seq=first + i, kind=kind, data=data, created_at=now)
            for i, (kind, data) in enumerate(batch)
        )
        s.commit()
    return True


@dataclass
class Ending:
    status: str
    result: dict[str, Any] | None = None
    error: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    sandbox: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None


def finish(factory: sessionmaker[Session], run_id: str, worker_id: str, end: Ending) -> bool:
    """Record the end of a run this worker owns; False if it was taken away meanwhile."""
    assert end.status in FINAL_STATUSES
    with factory() as s:
        done = _changed(
            s,
            update(Run)
            .where(Run.id == run_id, Run.worker_id == worker_id, Run.status == "running")
            .values(
                status=end.status,
                result=end.result,
                error=end.error,
                environment=end.environment,
                sandbox=end.sandbox,
                duration_s=end.duration_s,
                finished_at=utcnow(),
                heartbeat_at=utcnow(),
            ),
        )
        s.commit()
        return bool(done)


def requeue_own(factory: sessionmaker[Session], run_id: str, worker_id: str, reason: str) -> bool:
    """Give a run back to the queue (worker shutting down); the attempt is not counted."""
    with factory() as s:
        done = _changed(
            s,
            update(Run)
            .where(Run.id == run_id, Run.worker_id == worker_id, Run.status == "running")
            .values(status="queued", worker_id=None, heartbeat_at=None, attempts=Run.attempts - 1),
        )
        s.commit()
    if done:
        _notice(factory, run_id, "requeued", reason)
    return bool(done)


def _notice(factory: sessionmaker[Session], run_id: str, code: str, text: str) -> None:
    """Append a notice event to a run no worker owns (reaper, shutdown)."""
    with factory() as s:
        s.execute(update(Run).where(Run.id == run_id).values(event_count=Run.event_count + 1))
        seq = s.scalar(select(Run.event_count).where(Run.id == run_id)) or 1
        s.add(
            RunEvent(
                run_id=run_id,
                seq=seq,
                kind="notice",
                data={"level": "warning", "code": code, "text": text},
                created_at=utcnow(),
            )
        )
        s.commit()


def register_worker(
    factory: sessionmaker[Session],
    worker_id: str,
    host: str,
    pid: int,
    queues: list[str],
    capabilities: dict[str, Any],
) -> None:
    with factory() as s:
        s.merge(
            Worker(
                id=worker_id,
                host=host,
                pid=pid,
                queues=",".join(queues),
                capabilities=capabilities,
                started_at=utcnow(),
                last_heartbeat=utcnow(),
                status="up",
            )
        )
        s.commit()


def heartbeat(
    factory: sessionmaker[Session],
    worker_id: str,
    executing: Iterable[str] = (),
    status: str = "up",
) -> set[str]:
    """Mark this worker alive, and the runs it is ``executing`` right now; returns ids
    of its runs whose cancellation was requested.

    Only those runs: a run this worker claimed but has given up on (its result could
    not be stored through a long database outage) must age, so the reaper takes it,
    rather than look alive for as long as the worker lives."""
    now = utcnow()
    ids = list(executing)
    with factory() as s:
        if ids:
            s.execute(
                update(Run)
                .where(Run.id.in_(ids), Run.worker_id == worker_id, Run.status == "running")
                .values(heartbeat_at=now)
            )
        s.execute(
            update(Worker).where(Worker.id == worker_id).values(last_heartbeat=now, status=status)
        )
        s.commit()
        return cancel_requests(s, worker_id)


def cancel_requests(session: Session, worker_id: str) -> set[str]:
    q = select(Run.id).where(
        Run.worker_id == worker_id, Run.status == "running", Run.cancel_requested.is_(True)
    )
    return set(session.scalars(q))


@dataclass
class ReapReport:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    reenqueued: list[str] = field(default_factory=list)


def reap(
    factory: sessionmaker[Session], queue: RunQueue, settings: Settings, now: datetime | None = None
) -> ReapReport:
    """End or re-queue runs whose worker stopped heartbeating, and re-enqueue queued
    runs the queue has lost. Safe to run in every worker at once."""
    now = now or utcnow()
    cutoff = now - timedelta(seconds=settings.reaper_grace_seconds)
    report = ReapReport()
    with factory() as s:
        stale = s.execute(
            select(Run.id, Run.attempts, Run.queue).where(
                Run.status == "running", Run.heartbeat_at < cutoff
            )
        ).all()
        s.execute(
            update(Worker)
            .where(Worker.status == "up", Worker.last_heartbeat < cutoff)
            .values(status="lost")
        )
        s.commit()
    for run_id, attempts, qname in stale:
        is_stale = (Run.id == run_id, Run.status == "running", Run.heartbeat_at < cutoff)
        with factory() as s:
            if attempts < settings.max_attempts:
                n = _changed(
                    s,
                    update(Run)
                    .where(*is_stale)
                    .values(status="queued", worker_id=None, heartbeat_at=None),
                )
                s.commit()
                if n:
                    _notice(
                        factory,
                        run_id,
                        "worker_lost",
                        f"The worker running attempt {attempts} stopped responding; "
                        f"the run was queued again (attempt {attempts + 1} of {settings.max_attempts}).",
                    )
                    queue.enqueue(run_id, qname)
                    report.requeued.append(run_id)
            else:
                n = _changed(
                    s,
                    update(Run)
                    .where(*is_stale)
                    .values(
                        status="failed",
                        error=WORKER_LOST_ERROR.format(attempts=attempts),
                        finished_at=now,
                    ),
                )
                s.commit()
                if n:
                    report.failed.append(run_id)
    report.reenqueued = _reenqueue_lost(factory, queue, now)
    if report.requeued or report.failed or report.reenqueued:
        log.warning(
            "reaper",
            extra={
                "requeued": report.requeued,
                "failed": report.failed,
                "reenqueued": report.reenqueued,
            },
        )
    return report


def _reenqueue_lost(factory: sessionmaker[Session], queue: RunQueue, now: datetime) -> list[str]:
    old = now - timedelta(seconds=LOST_QUEUED_MIN_AGE_S)
    with factory() as s:
        waiting = s.execute(
            select(Run.id, Run.queue).where(Run.status == "queued", Run.created_at < old)
        ).all()
    if not waiting:
        return []
    found: list[str] = []
    pending: dict[str, set[str]] = {}
    for run_id, qname in waiting:
        if qname not in pending:
            pending[qname] = queue.pending_ids(qname)
        if run_id not in pending[qname]:
            queue.enqueue(run_id, qname)
            found.append(run_id)
    return found


def is_final(status: str) -> bool:
    return status in FINAL_STATUSES
