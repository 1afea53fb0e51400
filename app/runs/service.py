"""What the routers call to start a run and to show one: the seam between the
HTTP layer (app.routes) and the run store, so no router imports another."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.requests import Request

from app import notebook
from app.db import Run, RunShare
from app.runs import cost, forms, store
from app.runs.catalog import LabCatalogue
from app.runs.queue import RunQueue
from app.runs.views import DiffRow, arrange_outputs, diff, latest_progress
from app.settings import Settings
from app.templating import is_htmx
from labs.base import WHOLE_REQUEST, InvalidParams, Lab
from labs.viz.inline import shared_axes

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


def form_estimate(lab: Lab, values: Mapping[str, Any] | None) -> str:
    """What the lab form says a run with ``values`` (form text; None: the defaults)
    takes on this server ("about 2 min"); "" while the values are not valid."""
    try:
        text = {k: str(v) for k, v in (values or {}).items()}
        params = lab.validate(forms.parse_form(lab, text) if values else {})
    except (InvalidParams, ValueError):  # ValueError: a field nested past the form's depth
        return ""
    return cost.about(cost.estimate_seconds(lab.id, params.model_dump(mode="json")))


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
        "queue_place": store.queue_place(session, run, settings),
        "workers_up": (
            store.live_workers(session, run.queue, settings) if run.status == "queued" else None
        ),
        "previous": previous,
        "entry": notebook.for_run(session, run),
        "share": session.scalar(select(RunShare).where(RunShare.run_id == run.id)),
    }


def heading_level(request: Request) -> int:
    """The run's heading level where it is shown: 1 where the run is the page; inside
    another page (the lab page, a lesson step) the page asked for one (``?level=``), so
    the run keeps it when it is swapped in again (its end, Cancel)."""
    level = request.query_params.get("level", "")
    if level in {"2", "3", "4"}:
        return int(level)
    return 2 if is_htmx(request) else 1


def lab_title(labs: LabCatalogue, lab_id: str) -> str:
    """The lab's title, or its id for a lab this deployment no longer offers."""
    lab = labs.get(lab_id)
    return lab.title if lab else lab_id


def _plots(session: Session, run: Run) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A run's lead figure and all its figures, in order."""
    events = [store.event_json(e) for e in store.events_after(session, run.id)]
    body = arrange_outputs([e for e in events if e["kind"] in OUTPUT_KINDS])
    return body.lead, [e for e in events if e["kind"] == "plot"]


def _figure_keys(e: dict[str, Any]) -> list[str]:
    """What pairs a figure with the same figure of another run: its ``id`` (events
    schema 2, ``labs.events``), then, for runs stored before figures had one, its title
    without what names the run (the format in parentheses, the element type)."""
    title = re.sub(r"\s*\([^)]*\)|\b(E\dM\d|int\d+)\b", "", str(e["data"].get("title", "")))
    figure_id = e["data"].get("id")
    return ([f"id:{figure_id}"] if figure_id else []) + [f"title:{title}"]


def _same_figure(e: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The figure of ``others`` that is ``e``: the one with its id; where either has no
    id (a run stored before ids), the one with its title."""
    by_key = {key: o for o in others for key in _figure_keys(o)}
    keys = _figure_keys(e)
    if len(keys) == 2 and keys[0] in by_key:
        return by_key[keys[0]]
    found = by_key.get(keys[-1])
    if found is not None and len(keys) == 2 and found["data"].get("id"):
        return None  # both have ids, and they differ: titles alike, figures not
    return found


def paired_figures(session: Session, a: Run, b: Run) -> list[dict[str, Any] | None]:
    """The same figure of both runs: a's lead where b has it too, else the first
    figure both have, else each run's own lead."""
    (lead_a, plots_a), (lead_b, plots_b) = _plots(session, a), _plots(session, b)
    ordered = ([lead_a] if lead_a else []) + plots_a
    for e in ordered:
        other = _same_figure(e, plots_b)
        if other is not None:
            return [e, other]
    return [lead_a, lead_b]


def paired_histograms(session: Session, a: Run, b: Run) -> list[dict[str, Any]] | None:
    """The first histogram (or bar figure with its values) both runs drew differently
    (block-quantize: the errors of each value, the input values of one tensor being the
    same in both; model-quality: SQNR by kind of weight), as a pair."""
    (_, plots_a), (_, plots_b) = _plots(session, a), _plots(session, b)

    def binned(e: dict[str, Any]) -> dict[str, Any]:
        return e["data"].get("data") or {}

    def redrawable(e: dict[str, Any]) -> bool:  # a histogram, or bars with their values
        return bool(binned(e).get("edges")) or binned(e).get("kind") == "bars"

    drawable_b = [e for e in plots_b if redrawable(e)]
    for e in plots_a:
        other = _same_figure(e, drawable_b)
        if other is not None and redrawable(e) and binned(e) != binned(other):
            return [e, other]
    return None


def _tile_rows(lab: Lab | None, a: Run, b: Run) -> list[dict[str, Any]]:
    """The lab's headline tiles of both runs, matched by label, with b − a and b / a of
    the numbers the tiles show (in the tiles' unit)."""
    if lab is None:
        return []
    ta = {t.label: t for t in lab.tiles(a.result)}
    tb = {t.label: t for t in lab.tiles(b.result)}
    rows = []
    for label in list(ta) + [k for k in tb if k not in ta]:
        x, y = ta.get(label), tb.get(label)
        row = DiffRow(label, x.value if x else None, y.value if y else None)
        unit = x.unit if x else (y.unit if y else "")
        rows.append(
            {"label": label, "a": x, "b": y, "delta": row.delta, "ratio": row.ratio, "unit": unit}
        )
    return rows


def compare_context(session: Session, labs: LabCatalogue, a: Run, b: Run) -> dict[str, Any]:
    """What ``runs/compare.html`` shows: headline tiles side by side with deltas and
    ratios, both lead figures, then the parameters and results that differ (and those
    that do not, apart)."""
    lab = labs.get(a.lab_id)
    leads = paired_figures(session, a, b)
    hists = paired_histograms(session, a, b)
    lead_axes = shared_axes(leads)
    if lead_axes and hists and [h["seq"] for h in hists] == [e["seq"] for e in leads if e]:
        hists = None  # the lead pair is already drawn on one axis
    results = diff(a.result, b.result)
    differ = [r for r in results if not r.same]
    return {
        "a": a,
        "b": b,
        "lab_title": lab.title if lab else a.lab_id,
        "tiles": _tile_rows(lab, a, b),
        "leads": list(zip((a, b), leads, strict=True)),
        # The lead pair redrawn on one axis where its numbers are stored with it.
        "lead_axes": lead_axes,
        "histograms": list(zip((a, b), hists, strict=True)) if hists else [],
        "shared_axes": shared_axes(hists) if hists else None,
        "paired_noise": paired_noise(a, b),
        "params": diff(a.params, b.params, _field_titles(lab)),
        # Numbers and words first; element-by-element lists apart (they bury the rest).
        "results": [r for r in differ if not isinstance(r.a or r.b, list | dict)],
        "results_lists": [r for r in differ if isinstance(r.a or r.b, list | dict)],
        "results_same": [r for r in results if r.same],
        "summary": diff(_summary(a), _summary(b)),
    }


def param_label(lab_id: str, key: str) -> str:
    """A parameter as the lab's form names it: 'Tokens evaluated', not 'eval tokens'."""
    from labs.registry import get_lab

    return _field_titles(get_lab(lab_id)).get(key) or key.replace("_", " ")


# What must match for two model-lab runs to have scored the same windows.
SAME_WINDOWS = ("model", "eval_tokens", "context")


def paired_noise(a: Run, b: Run) -> str:
    """For two model-lab runs on the same held-out windows: B − A of the KL with its 95 %
    interval, paired window by window, and whether it is inside the noise ("" when the
    runs cannot be paired)."""
    from labs.lm.interval_text import noise_phrase, pm
    from labs.lm.intervals import paired_difference

    wa, wb = (a.result or {}).get("window_kl"), (b.result or {}).get("window_kl")
    same = all((a.params or {}).get(k) == (b.params or {}).get(k) for k in SAME_WINDOWS)
    if not (same and wa and wb and len(wa) == len(wb)):
        return ""
    d = paired_difference(wb, wa)
    return (
        f"KL divergence, B − A: {pm(d.mean, [d.low, d.high], 'nats')}, paired window by "
        f"window: {noise_phrase(d.as_dict())}"
        + (": these windows cannot tell the two runs apart." if d.inside_noise else ".")
    )


def _field_titles(lab: Lab | None) -> dict[str, str]:
    """The parameters a lab names in words of its own ("Tokens evaluated")."""
    if lab is None:
        return {}
    return {name: f.title for name, f in lab.params.model_fields.items() if f.title}


def _summary(run: Run) -> dict[str, Any]:
    return {
        "status": run.status,
        # Tenths of a second, as the run page says it ("17.7 s"), not 2.9239.
        "duration (s)": round(run.duration_s, 1) if run.duration_s is not None else None,
        "error": run.error,
        "device": (run.environment or {}).get("device"),
    }
