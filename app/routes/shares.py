"""Share links: a learner makes one run public, read-only, and can revoke it.

The link is ``/shared/<token>`` with a random token stored server-side
(``RunShare``); only the run's owner can create or revoke it (both POSTs carry the
CSRF token, as every unsafe request does). The shared page shows what the lab did
(parameters, outputs, result) and nothing about who ran it: no learner, no
notebook text, no worker host.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

from fastapi import HTTPException, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import routes
from app.db import INT32_MAX, Run, RunEvent, RunShare
from app.deps import LabsDep, RunDep, SessionDep
from app.runs import store
from app.runs.service import OUTPUT_KINDS, lab_title
from app.runs.views import arrange_outputs
from app.templating import is_htmx, render

router = routes.router(tags=["shares"])

Seq = Annotated[int, Path(ge=1, le=INT32_MAX)]
TOKEN_BYTES = 32  # 256 bits: a link cannot be guessed
NO_SUCH_SHARE = "No shared run at this link (it may have been revoked)."
# What a shared page may say about where the run ran: the hardware, never the host.
SHARED_ENVIRONMENT_KEYS = ("device", "gpu_name", "torch", "cuda", "python")


def share_of(session: Session, run: Run) -> RunShare | None:
    return session.scalar(select(RunShare).where(RunShare.run_id == run.id))


def _answer(request: Request, session: Session, run: Run) -> Response:
    """The share box again (htmx) or back to the run page."""
    if is_htmx(request):
        return render(request, "runs/_share.html", {"run": run, "share": share_of(session, run)})
    return RedirectResponse(f"/runs/{run.id}#share-{run.id}", status_code=303)


@router.post("/runs/{run_id}/share", response_model=None)
def share_run(run: RunDep, request: Request, session: SessionDep) -> Response:
    """Make the run public (idempotent: an existing link is kept)."""
    if not run.is_final:
        raise HTTPException(409, "A run can be shared once it has ended.")
    if share_of(session, run) is None:
        session.add(RunShare(token=secrets.token_urlsafe(TOKEN_BYTES), run_id=run.id))
        try:
            session.commit()
        except IntegrityError:  # a second click got there first: keep its link
            session.rollback()
    return _answer(request, session, run)


@router.post("/runs/{run_id}/share/revoke", response_model=None)
def revoke_share(run: RunDep, request: Request, session: SessionDep) -> Response:
    """Revoke the link: it answers 404 from now on; sharing again makes a new one."""
    session.execute(delete(RunShare).where(RunShare.run_id == run.id))
    session.commit()
    return _answer(request, session, run)


def _shared(session: Session, token: str) -> Run:
    share = session.get(RunShare, token) if token.isascii() and len(token) <= 64 else None
    run = session.get(Run, share.run_id) if share is not None else None
    if run is None:
        raise HTTPException(404, NO_SUCH_SHARE)
    return run


@router.get("/shared/{token}/plots/{seq}.svg")
def shared_plot(token: str, seq: Seq, session: SessionDep) -> Response:
    """A shared run's plot image, as ``/runs/{id}/plots/{seq}.svg`` is for its owner."""
    run = _shared(session, token)
    event = session.query(RunEvent).filter_by(run_id=run.id, seq=seq, kind="plot").one_or_none()
    if event is None or not event.data.get("svg"):
        raise HTTPException(404, "No such plot.")
    return Response(
        str(event.data["svg"]),
        media_type="image/svg+xml",
        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
    )


@router.get("/shared/{token}", response_class=HTMLResponse)
def shared_run(token: str, request: Request, session: SessionDep, labs: LabsDep) -> Response:
    run = _shared(session, token)
    events = [store.event_json(e) for e in store.events_after(session, run.id)]
    env = run.environment or {}
    lab = labs.get(run.lab_id)
    ctx: dict[str, Any] = {
        "run": run,
        "lab_title": lab_title(labs, run.lab_id),
        # the run page's result body: tiles, the lead figure, tables, the other figures
        "tiles": lab.tiles(run.result) if lab is not None else [],
        "body": arrange_outputs([e for e in events if e["kind"] in OUTPUT_KINDS]),
        "environment": {k: env[k] for k in SHARED_ENVIRONMENT_KEYS if k in env},
        "token": token,
    }
    resp = render(request, "runs/shared.html", ctx)
    resp.headers["Cache-Control"] = "no-store"  # revoking must take effect at once
    resp.headers["X-Robots-Tag"] = "noindex"
    resp.headers["Referrer-Policy"] = "no-referrer"  # the token never leaks onward
    return resp
