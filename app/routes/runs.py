"""Lab runs: the JSON API, the live event streams, run pages, history and compare.

The API and the pages read the same rows. A learner sees only their own runs:
anyone else's answers 404, in the API, the streams and the pages alike.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import anyio
from fastapi import HTTPException, Path, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)

from app import notebook, routes
from app.db import INT32_MAX, Run, RunEvent
from app.deps import (
    NO_SUCH_RUN,
    FormDep,
    LabDep,
    LabsDep,
    LearnerDep,
    QueueDep,
    RunDep,
    SessionDep,
    SettingsDep,
    anonymous_run_limit,
    get_own_run,
)
from app.runs import store
from app.runs.cost import about, ordinal
from app.runs.live import SSE_HEADERS, After, Waiting, resume_from, stream
from app.runs.service import (
    HISTORY_LIMIT,
    OUTPUT_KINDS,
    compare_context,
    heading_level,
    param_label,
    run_context,
    start_run,
)
from app.runs.views import format_params, format_value, quantity, sse
from app.streams import SlotStreamingResponse, StreamSlot
from app.templating import is_htmx, render, templates
from labs.base import WHOLE_REQUEST
from labs.viz.inline import histogram_svg
from labs.viz.theme import themed

router = routes.router(tags=["runs"])

# The htmx event (HX-Trigger) an ended run's fragment sends: a lab page's run history
# listens for it (``hx-trigger="run-ended from:body"``) and fetches itself again.
RUN_ENDED = "run-ended"

Seq = Annotated[int, Path(ge=1, le=INT32_MAX)]

templates.env.filters.setdefault("labvalue", format_value)
templates.env.filters.setdefault("about", about)
templates.env.filters.setdefault("ordinal", ordinal)
templates.env.filters.setdefault("runparams", format_params)
templates.env.globals.setdefault("labhistogram", histogram_svg)
templates.env.globals.setdefault("run_actuals", notebook.actuals)
templates.env.globals.setdefault("grade_words", notebook.grade_words)
templates.env.filters.setdefault("output_label", notebook.output_label)
templates.env.filters.setdefault("shown_value", notebook.shown_value)
templates.env.filters.setdefault("quantity", quantity)
templates.env.globals.setdefault("param_label", param_label)


# ----------------------------------------------------------------------------
# JSON API
# ----------------------------------------------------------------------------


@router.get("/api/labs")
def api_labs(labs: LabsDep) -> list[dict[str, Any]]:
    return [
        {
            "id": lab.id,
            "title": lab.title,
            "needs_gpu": lab.needs_gpu.value,
            "params_schema": lab.params_schema(),
        }
        for lab in labs.values()
    ]


@router.post("/api/labs/{lab_id}/runs", status_code=202)
async def api_start_run(
    lab: LabDep,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    queue: QueueDep,
    learner: LearnerDep,
) -> JSONResponse:
    body = await request.body()
    limit = anonymous_run_limit(request)

    def parse_and_start() -> tuple[Run | None, dict[str, str], int]:
        # Off the event loop: parsing (the body is at most max_body_bytes, nested at
        # most max_json_depth) and the database work, which ends by returning the
        # connection from this thread.
        try:
            data = json.loads(body) if body.strip() else {}
        except (ValueError, RecursionError) as e:
            return None, {"": f"The body is not valid JSON: {e}"}, 422
        try:
            return start_run(session, settings, queue, learner, lab, data, limit)
        finally:
            session.close()

    run, errors, status = await anyio.to_thread.run_sync(parse_and_start)
    if run is None:
        if status == 422:
            return JSONResponse(
                {"detail": [{"field": k, "message": v} for k, v in errors.items()]}, status_code=422
            )
        return JSONResponse({"detail": errors[WHOLE_REQUEST]}, status_code=status)
    return JSONResponse(
        {"id": run.id, "status": run.status, "url": f"/api/runs/{run.id}"}, status_code=202
    )


@router.get("/api/runs/{run_id}")
def api_run(run: RunDep, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    return store.run_json(
        run, store.events_after(session, run.id), store.queue_place(session, run, settings)
    )


@router.post("/api/runs/{run_id}/cancel")
def api_cancel(run_id: str, session: SessionDep, learner: LearnerDep) -> dict[str, Any]:
    run = store.cancel_run(session, run_id, learner)
    if run is None:
        raise HTTPException(404, NO_SUCH_RUN)
    return {"id": run.id, "status": run.status, "cancel_requested": run.cancel_requested}


# ----------------------------------------------------------------------------
# Event streams: JSON for the API, HTML fragments for htmx
# ----------------------------------------------------------------------------


@router.get("/api/runs/{run_id}/events")
def api_events(
    slot: StreamSlot, run: RunDep, request: Request, session: SessionDep, after: After = 0
) -> StreamingResponse:
    """``text/event-stream``: ``event: <kind>`` with the event's JSON (``id`` = seq),
    ``event: status`` on each status change, and a final ``event: end``. Reconnecting
    with ``Last-Event-ID`` resumes after that event."""
    run_id = run.id
    session.close()

    def event(e: RunEvent) -> str:
        return sse(e.kind, json.dumps({"seq": e.seq, "kind": e.kind, "data": e.data}), e.seq)

    def status(run: Run, waiting: Waiting | None) -> str:
        place = waiting.position if waiting else None
        wait = waiting.wait if waiting else ""
        return sse(
            "status",
            json.dumps({"status": run.status, "queue_position": place, "queue_wait": wait}),
        )

    def end(run: Run) -> str:
        return sse(
            "end", json.dumps({"status": run.status, "error": run.error, "result": run.result})
        )

    return SlotStreamingResponse(
        stream(request, run_id, resume_from(request, after), event, status, end),
        slot,
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


@router.get("/runs/{run_id}/stream")
def html_events(
    slot: StreamSlot, run: RunDep, request: Request, session: SessionDep, after: After = 0
) -> StreamingResponse:
    """The same stream as HTML fragments for the htmx SSE extension: ``log`` lines,
    ``output`` blocks (tables, metrics, plots, notices), ``status`` (the run's status
    panel: badge, queue place, progress bar, Cancel) on every status or progress change,
    and ``end``, on which the page fetches the finished run."""
    run_id = run.id
    session.close()
    macros: Any = templates.env.get_template("runs/_event.html").module
    csrf_token = request.state.csrf_token
    level = heading_level(request)
    latest: dict[str, Any] = {"run": None, "progress": None, "waiting": None}

    def panel() -> str:
        waiting = latest["waiting"]
        return sse(
            "status",
            str(
                macros.status_panel(
                    latest["run"],
                    latest["progress"],
                    waiting.position if waiting else None,
                    waiting.workers_up if waiting else 0,
                    csrf_token,
                    level,
                    waiting.wait if waiting else "",
                )
            ),
        )

    def event(e: RunEvent) -> str | None:
        if e.kind == "log":
            return sse("log", str(macros.log_line(e)), e.seq)
        if e.kind in OUTPUT_KINDS:
            return sse("output", str(macros.output(run_id, e)), e.seq)
        if e.kind == "progress":
            latest["progress"] = e.data
            # Before the first status poll there is no run to draw the panel with.
            return panel() if latest["run"] is not None else None
        return None

    def status(run: Run, waiting: Waiting | None) -> str:
        latest["run"], latest["waiting"] = run, waiting
        return panel()

    def end(run: Run) -> str:
        return sse("end", run.status)

    return SlotStreamingResponse(
        stream(request, run_id, resume_from(request, after), event, status, end),
        slot,
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


# ----------------------------------------------------------------------------
# Pages
# ----------------------------------------------------------------------------


@router.get("/runs/compare", response_class=HTMLResponse)
def run_compare(
    request: Request, session: SessionDep, labs: LabsDep, learner: LearnerDep
) -> HTMLResponse:
    """Two runs of the same lab side by side: ``?a=ID&b=ID`` or ``?run=ID&run=ID``."""
    ids = request.query_params.getlist("run") or [
        x for x in (request.query_params.get("a"), request.query_params.get("b")) if x
    ]
    if len(ids) != 2:
        raise HTTPException(422, "Choose exactly two runs to compare.")
    a, b = (get_own_run(i, session, learner) for i in ids)
    if a.lab_id != b.lab_id:
        raise HTTPException(422, "Only runs of the same lab can be compared.")
    return render(request, "runs/compare.html", compare_context(session, labs, a, b))


@router.get("/runs/{run_id}", response_class=HTMLResponse, response_model=None)
def run_page(
    run: RunDep, request: Request, session: SessionDep, settings: SettingsDep, labs: LabsDep
) -> Response:
    if run.kind == "submission":  # an exercise submission has its own page
        return RedirectResponse(f"/submissions/{run.id}", status_code=303)
    ctx = run_context(session, settings, labs, run)
    ctx["heading_level"] = heading_level(request)
    resp = render(request, "runs/run.html", ctx, block_name="run")
    if run.is_final and is_htmx(request):
        resp.headers["HX-Trigger"] = RUN_ENDED
    return resp


@router.post("/runs/{run_id}/cancel", response_model=None)
def run_cancel(
    run_id: str,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    labs: LabsDep,
    learner: LearnerDep,
    form: FormDep,
) -> Response:
    """Cancel from the run's page (htmx swaps the run in place) or from a history
    table (back to the table: ``next``, a path on this site)."""
    run = store.cancel_run(session, run_id, learner)
    if run is None:
        raise HTTPException(404, NO_SUCH_RUN)
    if is_htmx(request):
        ctx = run_context(session, settings, labs, run)
        ctx["heading_level"] = heading_level(request)
        return render(request, "runs/run.html", ctx, block_name="run")
    back = str(form.get("next") or "")
    local = back.startswith("/") and not back.startswith("//") and "\\" not in back
    return RedirectResponse(back if local else f"/runs/{run_id}", status_code=303)


@router.get("/runs/{run_id}/plots/{seq}.svg")
def run_plot(run: RunDep, seq: Seq, session: SessionDep) -> Response:
    """A plot event's SVG as an image (shown with <img>, so its styles never touch the
    page), with the theme's colours; sanitised when it was stored (``claims.append_events``)."""
    event = session.query(RunEvent).filter_by(run_id=run.id, seq=seq, kind="plot").one_or_none()
    if event is None or not event.data.get("svg"):
        raise HTTPException(404, "No such plot.")
    return Response(
        themed(str(event.data["svg"])),
        media_type="image/svg+xml",
        headers={"Cache-Control": "private, max-age=86400"},
    )


@router.get("/runs", response_class=HTMLResponse)
def run_history(
    request: Request, session: SessionDep, labs: LabsDep, learner: LearnerDep, lab: str = ""
) -> HTMLResponse:
    items = store.list_runs(session, learner, lab or None, limit=HISTORY_LIMIT)
    return render(
        request,
        "runs/history.html",
        {"runs": items, "labs": labs, "lab_filter": lab if lab in labs else ""},
        block_name="history",
    )
