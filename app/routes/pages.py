"""The home page."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse

from app import routes
from app.deps import CatalogueDep
from app.templating import render

router = routes.router(tags=["pages"])

START_TERM = "quantization"


@router.get("/", response_class=HTMLResponse)
def home(request: Request, cat: CatalogueDep) -> HTMLResponse:
    lessons = cat.sorted_lessons()
    return render(
        request,
        "home.html",
        {
            "first_lesson": lessons[0] if lessons else None,
            "start_term": cat.terms.get(START_TERM),
            "collections": list(cat.collections.values()),
            "term_count": len(cat.terms),
            "lesson_count": len(lessons),
            "counts": {
                c: sum(1 for t in cat.terms.values() if c in t.front.collections)
                for c in cat.collections
            },
        },
    )
