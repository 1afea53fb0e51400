"""Lab pages: the catalogue, one lab with its generated form, and the form POST.

The form works without JavaScript (POST, then 303 to the run page). With htmx it
swaps the live run in below the form, or the form with its errors in place.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app import notebook, routes
from app.deps import FormDep, LearnerDep, SessionDep, SettingsDep
from app.routes.runs import HISTORY_LIMIT, run_context, start_run
from app.templating import is_htmx, render
from labs.base import Lab
from labs.runtime import forms, runs
from labs.runtime.catalog import available_labs, get_available_lab

router = routes.router(tags=["labs"])


def _lab(settings: Any, lab_id: str) -> Lab:
    lab = get_available_lab(settings, lab_id)
    if lab is None:
        raise HTTPException(404, f"There is no lab called {lab_id!r}.")
    return lab


@router.get("/labs", response_class=HTMLResponse)
def labs_index(request: Request, settings: SettingsDep) -> HTMLResponse:
    labs = sorted(available_labs(settings).values(), key=lambda lab: lab.title.lower())
    return render(request, "labs/index.html", {"labs": labs})


def _lab_page(
    request: Request,
    session: Any,
    learner: str,
    lab: Lab,
    values: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
    block_name: str | None = None,
) -> HTMLResponse:
    errors = errors or {}
    return render(
        request,
        "labs/lab.html",
        {
            "lab": lab,
            "fields": forms.form_fields(lab, values, errors),
            "form_error": errors.get(forms.FORM_ERROR_KEY),
            "history": runs.list_runs(session, learner, lab.id, limit=HISTORY_LIMIT),
        },
        block_name=block_name,
        status_code=status_code,
    )


@router.get("/labs/{lab_id}", response_class=HTMLResponse)
def lab_page(
    lab_id: str,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    learner: LearnerDep,
    rerun: str = "",
) -> HTMLResponse:
    """``?rerun=RUN_ID`` fills the form with that run's parameters."""
    lab = _lab(settings, lab_id)
    values = None
    if rerun:
        previous = runs.get_run(session, rerun, learner)
        if previous is not None and previous.lab_id == lab.id:
            values = dict(previous.params)
    return _lab_page(request, session, learner, lab, values)


@router.post("/labs/{lab_id}/runs", response_model=None)
def lab_submit(
    lab_id: str,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    learner: LearnerDep,
    raw_form: FormDep,
) -> Response:
    lab = _lab(settings, lab_id)
    form = {k: str(v) for k, v in raw_form.items()}
    embedded = bool(form.get("_source"))
    data = forms.parse_form(lab, form)
    try:
        prediction = notebook.read_prediction(lab, form)
    except notebook.PredictionError as e:
        errors, status, run = {forms.FORM_ERROR_KEY: str(e)}, 422, None
    else:
        run, errors, status = start_run(request, session, settings, learner, lab, data)
    if run is None and embedded:
        # A lab embedded in a lesson: the messages go where its output would appear.
        return render(
            request,
            "labs/_embed_errors.html",
            {"errors": errors},
            status_code=200 if is_htmx(request) else status,
        )
    if run is not None:
        notebook.record(session, learner, lab, run, prediction, form.get("_source", ""))
    if run is None:
        if is_htmx(request):
            # htmx swaps only 2xx answers: send the form with its errors as 200 and point it at the form.
            resp = _lab_page(request, session, learner, lab, form, errors, block_name="form")
            resp.headers["HX-Retarget"] = "#lab-form"
            resp.headers["HX-Reswap"] = "outerHTML"
            return resp
        return _lab_page(request, session, learner, lab, form, errors, status_code=status)
    if is_htmx(request):
        resp = render(
            request, "runs/run.html", run_context(session, settings, run), block_name="run"
        )
        if not embedded:  # a lesson keeps its own URL; the lab page follows the run
            resp.headers["HX-Push-Url"] = f"/runs/{run.id}"
        return resp
    return RedirectResponse(f"/runs/{run.id}", status_code=303)
