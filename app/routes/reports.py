"""A lab run as a Markdown report: the prediction, parameters, output, environment
and the learner's next step (the JSON is ``GET /api/runs/{id}``)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import PlainTextResponse

from app import notebook, routes
from app.db import Run
from app.deps import LabsDep, RunDep, SessionDep
from app.markdown import render_markdown
from app.runs.service import lab_title
from app.runs.views import flatten

router = routes.router(tags=["runs"])


def run_report(run: Run, title: str, entry: Any) -> str:
    """The run as Markdown (``templates/reports/run.md``); ``entry`` is its notebook
    entry or None."""
    verdict = notebook.grade_phrase(entry, run) if entry is not None else ""
    return render_markdown(
        "run.md",
        run=run,
        title=title,
        entry=entry,
        verdict=verdict,
        result_rows=flatten(run.result or {}),
    )


@router.get("/runs/{run_id}/report.md")
def report(run: RunDep, session: SessionDep, labs: LabsDep) -> PlainTextResponse:
    body = run_report(run, lab_title(labs, run.lab_id), notebook.for_run(session, run))
    return PlainTextResponse(
        body,
        media_type="text/markdown; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="lowbit-{run.lab_id}-{run.id[:8]}.md"'
        },
    )
