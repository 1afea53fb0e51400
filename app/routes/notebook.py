"""The learner's notebook: searchable, exportable as Markdown, private to its owner."""

from __future__ import annotations

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from sqlalchemy import select

from app import notebook, routes
from app.db import NotebookEntry, Run
from app.deps import FormDep, LearnerDep, SessionDep
from app.templating import render
from app.textfields import too_long

router = routes.router(tags=["notebook"])


def _entry(session, entry_id: str, learner: str) -> NotebookEntry:  # type: ignore[no-untyped-def]
    entry = session.get(NotebookEntry, entry_id[:32])
    if entry is None or entry.learner_id != learner:
        raise HTTPException(404, "No such notebook entry.")
    return entry


def _runs(session, entries: list[NotebookEntry]) -> dict[str, Run]:  # type: ignore[no-untyped-def]
    ids = [e.run_id for e in entries if e.run_id]
    return {r.id: r for r in session.scalars(select(Run).where(Run.id.in_(ids)))} if ids else {}


@router.get("/notebook", response_class=HTMLResponse)
def notebook_page(
    request: Request, session: SessionDep, learner: LearnerDep, q: str = ""
) -> HTMLResponse:
    entries = notebook.search(session, learner, q)
    runs = _runs(session, entries)
    for e in entries:
        notebook.settle(session, e, runs.get(e.run_id or ""))
    cut = too_long("A search", q.strip(), notebook.MAX_QUERY)
    return render(
        request,
        "notebook/index.html",
        {
            "entries": entries,
            "runs": runs,
            "q": q.strip()[: notebook.MAX_QUERY],
            "max_query": notebook.MAX_QUERY,
            "note": f"{cut} Searched for its first {notebook.MAX_QUERY}." if cut else "",
        },
        block_name="entries",
    )


@router.get("/notebook/export.md")
def notebook_export(session: SessionDep, learner: LearnerDep) -> Response:
    entries = notebook.search(session, learner, "", limit=10_000)
    body = notebook.to_markdown(entries, _runs(session, entries))
    return PlainTextResponse(
        body,
        media_type="text/markdown; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="lowbit-notebook.md"'},
    )


@router.post("/notebook/{entry_id}/reflect", response_class=HTMLResponse)
def reflect(
    entry_id: str, request: Request, session: SessionDep, learner: LearnerDep, form: FormDep
) -> Response:
    entry = _entry(session, entry_id, learner)
    next_step, evidence = (str(form.get(k, "")) for k in ("next_step", "evidence"))
    if problem := notebook.reflection_problem(next_step, evidence):
        # The form comes back with what was typed, not with what was saved before.
        typed = {"next_step": next_step, "evidence": evidence}
        return render(
            request,
            "notebook/_compare.html",
            {
                "entry": entry,
                "run": session.get(Run, entry.run_id or ""),
                "error": problem,
                "typed": typed,
            },
            status_code=422,
        )
    notebook.reflect(session, entry, next_step, evidence)
    if not request.headers.get("HX-Request"):
        return RedirectResponse("/notebook", status_code=303)
    return render(
        request,
        "notebook/_compare.html",
        {"entry": entry, "run": session.get(Run, entry.run_id or ""), "saved": True},
    )
