"""Full-text search and the "Go to" type-ahead."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse

from app import routes
from app.deps import SessionDep
from app.search import MAX_QUERY, search, suggest
from app.templating import render

router = routes.router(tags=["search"])


@router.get("/search", response_class=HTMLResponse)
def search_page(request: Request, session: SessionDep, q: str = "") -> HTMLResponse:
    q = q[: MAX_QUERY * 5]
    hits = search(session, q) if q.strip() else []
    return render(request, "search.html", {"q": q[:MAX_QUERY], "hits": hits}, block_name="results")


@router.get("/goto", response_class=HTMLResponse)
def goto(request: Request, session: SessionDep, q: str = "") -> HTMLResponse:
    """Type-ahead to any term or lesson; without JS, a jump to the best match or search."""
    docs = suggest(session, q)
    return render(
        request, "goto.html", {"q": q[:MAX_QUERY], "docs": docs}, block_name="suggestions"
    )
