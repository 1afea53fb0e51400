"""Full-text search and the "Go to" type-ahead."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse

from app import routes
from app.deps import SessionDep
from app.search import MAX_QUERY, search, suggest
from app.templating import is_htmx, render
from app.textfields import too_long

router = routes.router(tags=["search"])

PAGE_SIZE = 20  # hits per page of results
MAX_PAGE = 10  # the whole catalogue is under 200 documents


def _page(raw: str) -> int:
    """``?page=`` as 1..MAX_PAGE; anything else is page 1 (never a 422 for a typo)."""
    return min(int(raw), MAX_PAGE) if raw.isdigit() and int(raw) >= 1 else 1


@router.get("/search", response_class=HTMLResponse)
def search_page(
    request: Request, session: SessionDep, q: str = "", page: str = "1"
) -> HTMLResponse:
    # A search uses its first MAX_QUERY characters, and says so when there were more.
    cut = too_long("A search", q, MAX_QUERY)
    note = f"{cut} Searched for its first {MAX_QUERY}." if cut else ""
    q = q[:MAX_QUERY]
    n = _page(page[:4])
    # One hit past this page says whether there is a next one.
    found = search(session, q, limit=n * PAGE_SIZE + 1) if q.strip() else []
    ctx = {
        "q": q,
        "note": note,
        "max_query": MAX_QUERY,
        "hits": found[(n - 1) * PAGE_SIZE : n * PAGE_SIZE],
        "page": n,
        "first": (n - 1) * PAGE_SIZE + 1,
        "has_next": len(found) > n * PAGE_SIZE and n < MAX_PAGE,
    }
    return render(request, "search.html", ctx, block_name="results")


@router.get("/goto", response_class=HTMLResponse)
def goto(request: Request, session: SessionDep, q: str = "") -> HTMLResponse:
    """Type-ahead to any term or lesson; without JS, a jump to the best match or search."""
    docs = suggest(session, q)
    # The fragment replaces the header's own list (#goto-list); the full page's list
    # needs another id, since that header is on the page too.
    list_id = "goto-list" if is_htmx(request) else "goto-results"
    # No title is that long: a longer query matched on its first characters, and says so.
    cut = too_long("A go-to query", q, MAX_QUERY)
    note = f"{cut} Matched titles on its first {MAX_QUERY}." if cut else ""
    ctx = {"q": q[:MAX_QUERY], "docs": docs, "list_id": list_id, "note": note}
    return render(request, "goto.html", ctx, block_name="suggestions")
