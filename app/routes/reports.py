"""A lab run as a Markdown report: the prediction, parameters, output, environment
and the learner's next step (the JSON is ``GET /api/runs/{id}``)."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from fastapi.responses import PlainTextResponse

from app import notebook, routes
from app.db import Run
from app.deps import LearnerDep, SessionDep, SettingsDep
from labs.runtime import runs
from labs.runtime.catalog import get_available_lab
from labs.runtime.views import flatten, format_value

router = routes.router(tags=["runs"])


def _md(value: Any) -> str:
    return format_value(value).replace("|", "\\|").replace("\n", " ")


def run_report(run: Run, title: str, entry: Any) -> str:
    lines = [f"# {title} — run {run.id[:8]}", ""]
    lines.append(f"- **Lab:** `{run.lab_id}`")
    lines.append(f"- **Status:** {run.status.replace('_', ' ')}")
    if run.created_at:
        lines.append(f"- **Started:** {run.created_at:%Y-%m-%d %H:%M:%S} UTC")
    if run.duration_s is not None:
        lines.append(f"- **Duration:** {run.duration_s:.3g} s")
    if run.error:
        lines.append(f"- **Error:** {run.error}")
    if entry is not None:
        lines += ["", "## Prediction", "", entry.prediction or "—"]
        if entry.predicted_value is not None:
            actual = "—" if entry.actual_value is None else _md(entry.actual_value)
            graded = notebook.verdict(entry.prediction_correct)
            verdict = f" ({graded})" if graded else ""
            lines.append(
                f"\nPredicted `{entry.metric}` = {_md(entry.predicted_value)} {entry.predicted_unit}; actual {actual}{verdict}."
            )
    lines += ["", "## Parameters", "", "| parameter | value |", "|---|---|"]
    lines += [f"| {k} | {_md(v)} |" for k, v in (run.params or {}).items()] or ["| (defaults) | |"]
    if run.result:
        lines += ["", "## Result", "", "| field | value |", "|---|---|"]
        lines += [f"| {k} | {_md(v)} |" for k, v in flatten(run.result).items()]
    if run.environment:
        lines += ["", "## Environment", "", "| | |", "|---|---|"]
        lines += [f"| {k} | {_md(v)} |" for k, v in run.environment.items()]
    if run.sandbox:
        lines += ["", "## Sandbox", "", "| protection | in force | detail |", "|---|---|---|"]
        for name, p in run.sandbox.items():
            if isinstance(p, dict):
                lines.append(
                    f"| {name} | {'yes' if p.get('enabled') else 'NO'} | {_md(p.get('detail', ''))} |"
                )
    if entry is not None:
        lines += [
            "",
            "## Next step",
            "",
            entry.next_step or "—",
            "",
            "## Evidence kept",
            "",
            entry.evidence or "—",
        ]
    return "\n".join(lines) + "\n"


@router.get("/runs/{run_id}/report.md")
def report(
    run_id: str, session: SessionDep, settings: SettingsDep, learner: LearnerDep
) -> PlainTextResponse:
    run = runs.get_run(session, run_id[:64], learner)
    if run is None:
        raise HTTPException(404, "No such run.")
    lab = get_available_lab(settings, run.lab_id)
    body = run_report(run, lab.title if lab else run.lab_id, notebook.for_run(session, run))
    return PlainTextResponse(
        body,
        media_type="text/markdown; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="lowbit-{run.lab_id}-{run.id[:8]}.md"'
        },
    )
