"""What the routers call to start a run and to show one: the seam between the
HTTP layer (app.routes) and the run store, so no router imports another."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from app import notebook
from app.db import Run
from app.runs import store
from app.runs.catalog import LabCatalogue
from app.runs.queue import RunQueue
from app.runs.views import arrange_outputs, latest_progress
from app.settings import Settings
from labs.base import WHOLE_REQUEST, InvalidParams, Lab

# Runs shown in a lab's history and beside a run.
HISTORY_LIMIT = 50
# Event kinds a run page shows as output blocks (logs have their own panel).
OUTPUT_KINDS = frozenset({"table", "metric", "plot", "notice"})
# HTTP statuses of start_run's answers.
ACCEPTED = 202
INVALID = 422


def start_run(
    session: Session,
    settings: Settings,
    queue: RunQueue,
    learner: str,
    lab: Lab,
    data: Any,
    limit: Callable[[], None] | None = None,
) -> tuple[Run | None, dict[str, str], int]:
    """Validate ``data`` (``Lab.validate``) and submit the run: ``(run, {}, 202)``, or
    ``(None, {field: message}, status)``: 422 for bad parameters, 429/403 for a
    refusal (its message under ``WHOLE_REQUEST``). ``limit``, called once the
    parameters are valid, may raise ``RateLimited`` (the per-client limit on
    anonymous runs)."""
    try:
        params = lab.validate(data)
    except InvalidParams as e:
        return None, e.errors, INVALID
    if limit is not None:
        limit()
    try:
        run = store.submit(session, settings, queue, learner, lab, params)
    except store.RunRefused as e:
        return None, {WHOLE_REQUEST: e.message}, e.status
    return run, {}, ACCEPTED


def run_context(
    session: Session, settings: Settings, labs: LabCatalogue, run: Run
) -> dict[str, Any]:
    """What ``runs/run.html`` shows: the run, its events split into logs and
    outputs, progress, queue place, earlier runs of the lab and the notebook entry."""
    events = [store.event_json(e) for e in store.events_after(session, run.id)]
    lab = labs.get(run.lab_id)
    previous = [
        r
        for r in store.list_runs(session, run.learner_id, run.lab_id, limit=HISTORY_LIMIT)
        if r.id != run.id
    ]
    outputs = [e for e in events if e["kind"] in OUTPUT_KINDS]
    return {
        "run": run,
        "lab": lab,
        "tiles": lab.tiles(run.result) if lab is not None and run.is_final else [],
        "body": arrange_outputs(outputs),
        "lab_title": lab.title if lab else run.lab_id,
        "events": events,
        "logs": [e for e in events if e["kind"] == "log"],
        "outputs": outputs,
        "progress": latest_progress(events),
        "last_seq": events[-1]["seq"] if events else 0,
        "active": not run.is_final,
        "queue_position": store.queue_position(session, run),
        "workers_up": (
            store.live_workers(session, run.queue, settings) if run.status == "queued" else None
        ),
        "previous": previous,
        "entry": notebook.for_run(session, run),
    }


def lab_title(labs: LabCatalogue, lab_id: str) -> str:
    """The lab's title, or its id for a lab this deployment no longer offers."""
    lab = labs.get(lab_id)
    return lab.title if lab else lab_id
