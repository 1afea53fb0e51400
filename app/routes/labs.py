"""Lab pages: the catalogue, one lab with its generated form, and the form POST.

The form works without JavaScript (POST, then 303 to the run page). With htmx it
swaps the live run in below the form, or the form with its errors in place.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app import notebook, routes
from app.deps import (
    FormDep,
    LabDep,
    LabsDep,
    LearnerDep,
    QueueDep,
    SessionDep,
    SettingsDep,
    anonymous_run_limit,
)
from app.notebook import SOURCE_LIMIT
from app.runs import forms, store
from app.runs.service import HISTORY_LIMIT, form_estimate, run_context, start_run
from app.templating import is_htmx, render
from app.textfields import too_long
from labs.base import WHOLE_REQUEST, InvalidParams, Lab

router = routes.router(tags=["labs"])

# The htmx event (HX-Trigger) a started run sends; runs.RUN_ENDED is its pair.
RUN_STARTED = "run-started"
# The output box of a lesson's embedded lab (templates/labs/_embed.html: "lab-<n>-out").
_EMBED_OUT = re.compile(r"(lab-[0-9]{1,3}-)out")


@router.get("/labs", response_class=HTMLResponse)
def labs_index(request: Request, labs: LabsDep) -> HTMLResponse:
    ordered = sorted(labs.values(), key=lambda lab: lab.title.lower())
    return render(request, "labs/index.html", {"labs": ordered})


def _lab_page(
    request: Request,
    session: Any,
    learner: str,
    lab: Lab,
    values: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
    block_name: str | None = None,
    notes: list[str] | None = None,
) -> HTMLResponse:
    errors = errors or {}
    return render(
        request,
        "labs/lab.html",
        {
            "lab": lab,
            "fields": forms.form_fields(lab, values, errors),
            "form_error": errors.get(WHOLE_REQUEST),
            "link_notes": notes or [],
            "typed": values if isinstance(values, dict) else {},
            "pred_errors": {k: v for k, v in errors.items() if k.startswith("_")},
            "history": store.list_runs(session, learner, lab.id, limit=HISTORY_LIMIT),
            "estimate": form_estimate(lab, values),
        },
        block_name=block_name,
        status_code=status_code,
    )


@router.get("/labs/{lab_id}", response_class=HTMLResponse)
def lab_page(
    lab: LabDep,
    request: Request,
    session: SessionDep,
    learner: LearnerDep,
    rerun: str = "",
    predict: str = "",
) -> HTMLResponse:
    """``?rerun=RUN_ID`` fills the form with that run's parameters; ``?predict=KEY``
    (a card's link) picks the output the learner is asked to predict; any other
    ``?name=value`` (a term card's or lesson's link) fills that parameter, the value
    spelled as JSON or plainly. Unknown names and bad values come back as messages
    on the page, beside their field where they have one."""
    values: dict[str, Any] | None = None
    if rerun:
        previous = store.get_run(session, rerun, learner)
        if previous is not None and previous.lab_id == lab.id:
            values = dict(previous.params)
    linked, notes = forms.link_values(lab, list(request.query_params.multi_items()))
    errors: dict[str, str] = {}
    if linked:
        values = {**(values or {}), **linked}
        try:
            lab.validate(forms.parse_form(lab, linked))
        except InvalidParams as e:
            errors = {k: v for k, v in e.errors.items() if k in linked}
            notes += [v for k, v in e.errors.items() if k not in linked]
    if predict in dict(lab.numeric_outputs):
        values = {**(values or {}), "_metric": predict}
    return _lab_page(request, session, learner, lab, values, errors, notes=notes)


@router.get("/labs/{lab_id}/estimate", response_class=HTMLResponse)
def lab_estimate(lab: LabDep, request: Request) -> HTMLResponse:
    """How long a run with the form's values (as query parameters) takes: the
    sentence beside the Run button, fetched again when a field changes."""
    values = dict(request.query_params.items())
    values.pop("csrf_token", None)
    return render(
        request, "labs/_estimate_text.html", {"estimate": form_estimate(lab, values or None)}
    )


@router.get("/labs/{lab_id}/history", response_class=HTMLResponse)
def lab_history(
    lab: LabDep, request: Request, session: SessionDep, learner: LearnerDep
) -> HTMLResponse:
    """The lab page's run table alone: fetched again when a run starts or ends."""
    return _lab_page(request, session, learner, lab, block_name="history")


@router.post("/labs/{lab_id}/runs", response_model=None)
def lab_submit(
    lab: LabDep,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    labs: LabsDep,
    queue: QueueDep,
    learner: LearnerDep,
    raw_form: FormDep,
) -> Response:
    form = {k: str(v) for k, v in raw_form.items()}
    embedded = bool(form.get("_source"))
    data = forms.parse_form(lab, form)
    # The page that embedded the lab (set by the server's own templates): refused, not
    # cut, when a client sends a longer one.
    source_error = too_long("The page a lab starts from", form.get("_source", ""), SOURCE_LIMIT)
    try:
        prediction = notebook.read_prediction(lab, form)
    except notebook.PredictionError as e:
        # Beside its own field (the form keeps what was typed), not above the form.
        errors, status, run = {e.field: str(e)}, 422, None
    else:
        errors, status, run = {}, 422, None
    if source_error:
        errors, status, run = {"": source_error}, 422, None
    elif not errors:
        limit = anonymous_run_limit(request)
        run, errors, status = start_run(session, settings, queue, learner, lab, data, limit)
    if run is None and embedded:
        # A lab embedded in a lesson: the messages go where its output would appear.
        # A prediction error also re-marks the embed's own prediction fields (out of band).
        target = _EMBED_OUT.fullmatch(request.headers.get("HX-Target", ""))
        marked = target is not None and any(k.startswith("_") for k in errors)
        return render(
            request,
            "labs/_embed_errors.html",
            {
                "errors": {k.lstrip("_"): v for k, v in errors.items()},
                "lab": lab,
                "oob_prefix": target.group(1) if marked and target else "",
                "typed": form,
                "pred_errors": {k: v for k, v in errors.items() if k.startswith("_")},
            },
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
        ctx = run_context(session, settings, labs, run)
        ctx["heading_level"] = 4 if embedded else 2  # under a step's h3 / the lab's h1
        resp = render(request, "runs/run.html", ctx, block_name="run")
        if not embedded:  # a lesson keeps its own URL; the lab page follows the run
            resp.headers["HX-Push-Url"] = f"/runs/{run.id}"
        resp.headers["HX-Trigger"] = RUN_STARTED
        return resp
    return RedirectResponse(f"/runs/{run.id}", status_code=303)
