"""Lab runs: the JSON API, the live event streams, run pages, history and compare.

The API and the pages read the same rows. A learner sees only their own runs:
anyone else's answers 404, in the API, the streams and the pages alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
from fastapi import HTTPException, Path, Query, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app import notebook, routes
from app.db import INT32_MAX, Run, RunEvent
from app.deps import LearnerDep, SessionDep, SettingsDep
from app.settings import Settings
from app.templating import is_htmx, render, templates
from labs.base import Lab
from labs.plots import sanitize_svg
from labs.runtime import forms, runs
from labs.runtime.catalog import available_labs, get_available_lab
from labs.runtime.queue import RunQueue
from labs.runtime.views import diff, format_value, histogram_svg, latest_progress, sse

router = routes.router(tags=["runs"])

# Seconds between database polls of an event stream: the shortest right after news
# (a run that has just started or printed usually prints again soon), doubling on each
# poll that finds nothing, up to the longest (a queued or quiet run costs little).
SSE_POLL_MIN_S = 0.05
SSE_POLL_MAX_S = 0.4
# Seconds between keep-alive comments, so proxies keep an idle stream open.
SSE_KEEPALIVE_S = 15.0
# A stream ends after this long even if the run has not (the client reconnects).
SSE_MAX_S = 3600.0
# Seconds between polls while the database is unavailable.
SSE_DB_RETRY_S = 1.0
HISTORY_LIMIT = 50
# Event sequence numbers from the URL: out of the column's range is a 422, not a 500.
After = Annotated[int, Query(ge=0, le=INT32_MAX, description="resume after this event seq")]
Seq = Annotated[int, Path(ge=1, le=INT32_MAX)]
NOT_FOUND = "No such run (or it is not yours)."

templates.env.filters.setdefault("labvalue", format_value)
templates.env.globals.setdefault("labhistogram", histogram_svg)


def run_queue(request: Request) -> RunQueue:
    """The app's queue client, made on first use."""
    q: RunQueue | None = getattr(request.app.state, "run_queue", None)
    if q is None:
        q = RunQueue(request.app.state.settings)
        request.app.state.run_queue = q
    return q


def _own_run(session: Session, run_id: str, learner: str) -> Run:
    run = runs.get_run(session, run_id, learner)
    if run is None:
        raise HTTPException(404, NOT_FOUND)
    return run


def _lab_or_404(settings: Settings, lab_id: str) -> Lab:
    lab = get_available_lab(settings, lab_id)
    if lab is None:
        raise HTTPException(404, f"No lab {lab_id!r}. GET /api/labs lists them.")
    return lab


# ----------------------------------------------------------------------------
# JSON API
# ----------------------------------------------------------------------------


@router.get("/api/labs")
def api_labs(settings: SettingsDep) -> list[dict[str, Any]]:
    return [
        {
            "id": lab.id,
            "title": lab.title,
            "needs_gpu": lab.needs_gpu.value,
            "params_schema": lab.params_schema(),
        }
        for lab in available_labs(settings).values()
    ]


def start_run(
    request: Request, session: Session, settings: Settings, learner: str, lab: Lab, data: Any
) -> tuple[Run | None, dict[str, str], int]:
    """Validate and submit; (run, {}, 202) or (None, per-field errors, HTTP status)."""
    params, errors = forms.validate(lab, data)
    if params is None:
        return None, errors, 422
    if not request.state.signed_in:
        # Each new cookie is a new learner with its own quota: limit the client too.
        limiter = request.app.state.limiter
        limiter.hit(limiter.anonymous_run, request.state.client_ip)
    try:
        run = runs.submit(session, settings, run_queue(request), learner, lab, params)
    except runs.RunRefused as e:
        return None, {forms.FORM_ERROR_KEY: e.message}, e.status
    return run, {}, 202


@router.post("/api/labs/{lab_id}/runs", status_code=202)
async def api_start_run(
    lab_id: str, request: Request, session: SessionDep, settings: SettingsDep, learner: LearnerDep
) -> JSONResponse:
    lab = _lab_or_404(settings, lab_id)
    body = await request.body()
    try:
        data = json.loads(body) if body.strip() else {}
    except ValueError as e:
        return JSONResponse(
            {"detail": [{"field": "", "message": f"The body is not valid JSON: {e}"}]},
            status_code=422,
        )
    run, errors, status = await anyio.to_thread.run_sync(
        start_run, request, session, settings, learner, lab, data
    )
    if run is None:
        if status == 422:
            return JSONResponse(
                {"detail": [{"field": k, "message": v} for k, v in errors.items()]}, status_code=422
            )
        return JSONResponse({"detail": errors[forms.FORM_ERROR_KEY]}, status_code=status)
    return JSONResponse(
        {"id": run.id, "status": run.status, "url": f"/api/runs/{run.id}"}, status_code=202
    )


@router.get("/api/runs/{run_id}")
def api_run(run_id: str, session: SessionDep, learner: LearnerDep) -> dict[str, Any]:
    run = _own_run(session, run_id, learner)
    return runs.run_json(run, runs.events_after(session, run.id), runs.queue_position(session, run))


@router.post("/api/runs/{run_id}/cancel")
def api_cancel(run_id: str, session: SessionDep, learner: LearnerDep) -> dict[str, Any]:
    run = runs.cancel_run(session, run_id, learner)
    if run is None:
        raise HTTPException(404, NOT_FOUND)
    return {"id": run.id, "status": run.status, "cancel_requested": run.cancel_requested}


# ----------------------------------------------------------------------------
# Event streams: JSON for the API, HTML fragments for htmx
# ----------------------------------------------------------------------------


def _poll(factory: sessionmaker[Session], run_id: str, after: int) -> tuple[Run, list[RunEvent]]:
    with factory() as s:
        run = s.get(Run, run_id)
        assert run is not None
        # Status first: events are committed before the final status, so a final
        # status read here means the events read next are complete.
        return run, runs.events_after(s, run_id, after)


def _resume_from(request: Request, after: int) -> int:
    last = request.headers.get("last-event-id", "").strip()
    if last.isascii() and last.isdigit():
        return min(int(last), INT32_MAX)
    return after


async def _stream(
    request: Request,
    run_id: str,
    after: int,
    render_event: Callable[[RunEvent], str | None],
    render_status: Callable[[Run], str],
    render_end: Callable[[Run], str],
) -> AsyncIterator[str]:
    factory = request.app.state.sessionmaker
    last_seq, last_status = after, ""
    started = last_sent = time.monotonic()
    pause = SSE_POLL_MIN_S
    yield "retry: 1000\n\n"
    while time.monotonic() - started < SSE_MAX_S:
        if await request.is_disconnected():
            return
        try:
            run, events = await anyio.to_thread.run_sync(_poll, factory, run_id, last_seq)
        except (OperationalError, InterfaceError):
            # The database is restarting: keep the stream open and poll again
            # rather than drop the learner's page into a reconnect loop.
            await anyio.sleep(SSE_DB_RETRY_S)
            continue
        for e in events:
            text = render_event(e)
            if text:
                yield text
            last_seq = e.seq
        news = bool(events)
        if run.status != last_status:
            last_status, news = run.status, True
            yield render_status(run)
        if run.is_final:
            yield render_end(run)
            return
        if events or time.monotonic() - last_sent > SSE_KEEPALIVE_S:
            if not events:
                yield ": keep-alive\n\n"
            last_sent = time.monotonic()
        pause = SSE_POLL_MIN_S if news else min(pause * 2, SSE_POLL_MAX_S)
        await anyio.sleep(pause)


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@router.get("/api/runs/{run_id}/events")
def api_events(
    run_id: str, request: Request, session: SessionDep, learner: LearnerDep, after: After = 0
) -> StreamingResponse:
    """``text/event-stream``: ``event: <kind>`` with the event's JSON (``id`` = seq),
    ``event: status`` on each status change, and a final ``event: end``. Reconnecting
    with ``Last-Event-ID`` resumes after that event."""
    _own_run(session, run_id, learner)
    session.close()

    def event(e: RunEvent) -> str:
        return sse(e.kind, json.dumps({"seq": e.seq, "kind": e.kind, "data": e.data}), e.seq)

    def status(run: Run) -> str:
        return sse("status", json.dumps({"status": run.status}))

    def end(run: Run) -> str:
        return sse(
            "end", json.dumps({"status": run.status, "error": run.error, "result": run.result})
        )

    return StreamingResponse(
        _stream(request, run_id, _resume_from(request, after), event, status, end),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


_OUTPUT_KINDS = {"table", "metric", "plot", "notice"}


@router.get("/runs/{run_id}/stream")
def html_events(
    run_id: str, request: Request, session: SessionDep, learner: LearnerDep, after: After = 0
) -> StreamingResponse:
    """The same stream as HTML fragments for the htmx SSE extension: ``log`` lines,
    ``output`` blocks (tables, metrics, plots, notices), ``status``, ``end``."""
    _own_run(session, run_id, learner)
    session.close()
    macros = templates.env.get_template("runs/_event.html").module

    def event(e: RunEvent) -> str | None:
        if e.kind == "log":
            return sse("log", str(macros.log_line(e)), e.seq)  # type: ignore[attr-defined]
        if e.kind in _OUTPUT_KINDS:
            return sse("output", str(macros.output(run_id, e)), e.seq)  # type: ignore[attr-defined]
        return None

    def status(run: Run) -> str:
        return sse("status", str(macros.status_badge(run)))  # type: ignore[attr-defined]

    def end(run: Run) -> str:
        return sse("end", run.status)

    return StreamingResponse(
        _stream(request, run_id, _resume_from(request, after), event, status, end),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


# ----------------------------------------------------------------------------
# Pages
# ----------------------------------------------------------------------------


def run_context(session: Session, settings: Settings, run: Run) -> dict[str, Any]:
    events = [runs.event_json(e) for e in runs.events_after(session, run.id)]
    lab = get_available_lab(settings, run.lab_id)
    previous = [
        r
        for r in runs.list_runs(session, run.learner_id, run.lab_id, limit=HISTORY_LIMIT)
        if r.id != run.id
    ]
    return {
        "run": run,
        "lab": lab,
        "lab_title": lab.title if lab else run.lab_id,
        "events": events,
        "logs": [e for e in events if e["kind"] == "log"],
        "outputs": [e for e in events if e["kind"] in _OUTPUT_KINDS],
        "progress": latest_progress(events),
        "last_seq": events[-1]["seq"] if events else 0,
        "active": not run.is_final,
        "queue_position": runs.queue_position(session, run),
        "workers_up": (
            runs.live_workers(session, run.queue, settings) if run.status == "queued" else None
        ),
        "previous": previous,
        "entry": notebook.for_run(session, run),
    }


@router.get("/runs/compare", response_class=HTMLResponse)
def run_compare(
    request: Request, session: SessionDep, settings: SettingsDep, learner: LearnerDep
) -> HTMLResponse:
    """Two runs of the same lab side by side: ``?a=ID&b=ID`` or ``?run=ID&run=ID``."""
    ids = request.query_params.getlist("run") or [
        x for x in (request.query_params.get("a"), request.query_params.get("b")) if x
    ]
    if len(ids) != 2:
        raise HTTPException(422, "Choose exactly two runs to compare.")
    a, b = (_own_run(session, i, learner) for i in ids)
    if a.lab_id != b.lab_id:
        raise HTTPException(422, "Only runs of the same lab can be compared.")
    lab = get_available_lab(settings, a.lab_id)
    return render(
        request,
        "runs/compare.html",
        {
            "a": a,
            "b": b,
            "lab_title": lab.title if lab else a.lab_id,
            "params": diff(a.params, b.params),
            "results": diff(a.result, b.result),
            "summary": diff(
                {
                    "status": a.status,
                    "duration (s)": a.duration_s,
                    "error": a.error,
                    "device": (a.environment or {}).get("device"),
                },
                {
                    "status": b.status,
                    "duration (s)": b.duration_s,
                    "error": b.error,
                    "device": (b.environment or {}).get("device"),
                },
            ),
        },
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(
    run_id: str, request: Request, session: SessionDep, settings: SettingsDep, learner: LearnerDep
) -> HTMLResponse:
    run = _own_run(session, run_id, learner)
    return render(request, "runs/run.html", run_context(session, settings, run), block_name="run")


@router.get("/runs/{run_id}/status", response_class=HTMLResponse)
def run_status(
    run_id: str, request: Request, session: SessionDep, settings: SettingsDep, learner: LearnerDep
) -> HTMLResponse:
    """Polled every second while a run is active (the fallback when SSE is unavailable).
    Once the run has ended, the answer replaces the whole run section instead."""
    run = _own_run(session, run_id, learner)
    ctx = run_context(session, settings, run)
    if run.is_final and is_htmx(request):
        resp = render(request, "runs/run.html", ctx, block_name="run")
        resp.headers["HX-Retarget"] = "#run"
        resp.headers["HX-Reswap"] = "outerHTML"
        return resp
    return render(request, "runs/run.html", ctx, block_name="status")


@router.post("/runs/{run_id}/cancel", response_model=None)
def run_cancel(
    run_id: str, request: Request, session: SessionDep, settings: SettingsDep, learner: LearnerDep
) -> Response:
    run = runs.cancel_run(session, run_id, learner)
    if run is None:
        raise HTTPException(404, NOT_FOUND)
    if is_htmx(request):
        return render(
            request, "runs/run.html", run_context(session, settings, run), block_name="run"
        )
    return RedirectResponse(f"/runs/{run_id}", status_code=303)


@router.get("/runs/{run_id}/plots/{seq}.svg")
def run_plot(run_id: str, seq: Seq, session: SessionDep, learner: LearnerDep) -> Response:
    """A plot event's SVG as an image (shown with <img>, so its styles never touch the page)."""
    _own_run(session, run_id, learner)
    event = session.query(RunEvent).filter_by(run_id=run_id, seq=seq, kind="plot").one_or_none()
    if event is None or not event.data.get("svg"):
        raise HTTPException(404, "No such plot.")
    return Response(
        sanitize_svg(str(event.data["svg"])),
        media_type="image/svg+xml",
        headers={"Cache-Control": "private, max-age=86400"},
    )


@router.get("/runs", response_class=HTMLResponse)
def run_history(
    request: Request, session: SessionDep, settings: SettingsDep, learner: LearnerDep, lab: str = ""
) -> HTMLResponse:
    labs = available_labs(settings)
    items = runs.list_runs(session, learner, lab or None, limit=HISTORY_LIMIT)
    return render(
        request,
        "runs/history.html",
        {"runs": items, "labs": labs, "lab_filter": lab if lab in labs else ""},
        block_name="history",
    )
