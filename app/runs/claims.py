"""The worker's side of the run store: claim, events, finish, heartbeats, the reaper.

Every state change is one conditional UPDATE (see ``app.runs.store``), so two
workers, a reaper and a learner pressing "cancel" can race without a run ending
up in two states. A worker that loses a race learns it from the row count and
stops the lab.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from app.db import FINAL_STATUSES, Run, RunEvent, Worker, utcnow
from app.runs import store
from app.runs.queue import RunQueue
from app.runs.store import changed_rows, is_short
from app.settings import Settings
from labs.viz.theme import sanitize_svg

log = logging.getLogger("lowbit.runs")

# A queued run younger than this may not have reached the queue yet (the web
# process inserts, commits, then enqueues): the reaper leaves it alone.
LOST_QUEUED_MIN_AGE_S = 5.0

WORKER_LOST_ERROR = (
    "worker lost: the worker running this lab stopped responding after {attempts} attempt(s). "
    "Start the run again; if it keeps happening, tell the site's operators."
)


def claim(factory: sessionmaker[Session], run_id: str, worker_id: str) -> Run | None:
    """Take a queued run for ``worker_id``; None if it is not queued (duplicate message,
    cancelled, or already taken)."""
    now = utcnow()
    with factory() as s:
        taken = changed_rows(
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


# Candidates a worker tries, in fair order, before giving its turn up: each lost
# race means another worker took that run.
CLAIM_TRIES = 8


def claim_next(
    factory: sessionmaker[Session], worker_id: str, queue: str, short: bool, settings: Settings
) -> Run | None:
    """Take the queued run of one lane whose turn it is (``store.fair_order``:
    round-robin between learners); None if the lane has none left."""
    with factory() as s:
        order = store.queued_in_lane(s, queue, short, settings, limit=store.FAIR_WINDOW)
    for candidate in order[:CLAIM_TRIES]:
        run = claim(factory, candidate.id, worker_id)
        if run is not None:
            return run
    return None


def append_events(
    factory: sessionmaker[Session],
    run_id: str,
    worker_id: str,
    events: Iterable[tuple[str, dict[str, Any]]],
) -> bool:
    """Store ``events`` with consecutive ``seq`` numbers; False if this worker no longer
    owns the run (the reaper gave it away, or it ended): the caller stops the lab."""
    batch = [(kind, stored_data(kind, data)) for kind, data in events]
    now = utcnow()
    with factory() as s:
        owned = changed_rows(
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


def stored_data(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """An event's data as the store keeps it: a figure's SVG is sanitised here, once,
    so the pages that serve it (``/runs/…/plots``, a share link's) send it as stored."""
    if kind == "plot" and "svg" in data:
        return {**data, "svg": sanitize_svg(str(data["svg"]))}
    return data


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
        done = changed_rows(
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
        done = changed_rows(
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
            select(Run.id, Run.attempts, Run.queue, Run.estimate_s).where(
                Run.status == "running", Run.heartbeat_at < cutoff
            )
        ).all()
        s.execute(
            update(Worker)
            .where(Worker.status == "up", Worker.last_heartbeat < cutoff)
            .values(status="lost")
        )
        s.commit()
    for run_id, attempts, qname, estimate_s in stale:
        is_stale = (Run.id == run_id, Run.status == "running", Run.heartbeat_at < cutoff)
        with factory() as s:
            if attempts < settings.max_attempts:
                n = changed_rows(
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
                    queue.enqueue(run_id, qname, short=is_short(estimate_s, settings))
                    report.requeued.append(run_id)
            else:
                n = changed_rows(
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
    report.reenqueued = _reenqueue_lost(factory, queue, settings, now)
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


def _reenqueue_lost(
    factory: sessionmaker[Session], queue: RunQueue, settings: Settings, now: datetime
) -> list[str]:
    """Give each lane back the turns it lost: a message is a turn, not a claim on one
    run, so a lane needs as many messages as it has queued runs. The missing ones
    are enqueued for the oldest runs without a message of their own (and only for
    runs old enough to have had one)."""
    old = now - timedelta(seconds=LOST_QUEUED_MIN_AGE_S)
    with factory() as s:
        waiting = s.execute(
            select(Run.id, Run.queue, Run.estimate_s, Run.created_at)
            .where(Run.status == "queued")
            .order_by(Run.created_at)
        ).all()
    lanes: dict[tuple[str, bool], list[tuple[str, bool]]] = {}
    for run_id, qname, estimate_s, created_at in waiting:
        lanes.setdefault((qname, is_short(estimate_s, settings)), []).append(
            (run_id, created_at < old)
        )
    found: list[str] = []
    for (qname, short), runs in lanes.items():
        missing = len(runs) - queue.pending_count(qname, short)
        if missing <= 0:
            continue
        pending = queue.pending_ids(qname, short)
        lost = [run_id for run_id, is_old in runs if is_old and run_id not in pending]
        for run_id in lost[:missing]:
            queue.enqueue(run_id, qname, short)
            found.append(run_id)
    return found
