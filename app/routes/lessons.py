"""Guided lessons: steps with embedded, pre-filled lab forms."""

from __future__ import annotations

import re

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from app import progress, routes
from app.content import Catalogue
from app.deps import CatalogueDep, LearnerDep, SessionDep
from app.runs.forms import form_fields
from app.templating import render
from labs.registry import get_lab

router = routes.router(tags=["lessons"])


@router.get("/lessons", response_class=HTMLResponse)
def lessons_index(
    request: Request, cat: CatalogueDep, session: SessionDep, learner: LearnerDep
) -> Response:
    return render(
        request,
        "lessons/index.html",
        {"lessons": cat.sorted_lessons(), "marks": progress.marks(session, learner)},
    )


@router.get("/lessons/{slug}", response_class=HTMLResponse)
def lesson_page(
    request: Request, slug: str, cat: CatalogueDep, session: SessionDep, learner: LearnerDep
) -> Response:
    lesson = cat.lessons.get(slug)
    if lesson is None:
        raise HTTPException(404, f"No lesson called '{slug[:80]}'.")
    segments = []
    n_lab = 0
    for kind, seg in lesson.segments:
        if kind == "lab":
            lab = get_lab(seg.lab)
            if lab is None:  # the checker rejects this; never crash a page over it
                continue
            n_lab += 1
            segments.append(
                (
                    "lab",
                    {
                        "lab": lab,
                        "fields": form_fields(lab, seg.params),
                        "prompt": _without_lead_in(seg.prompt or ""),
                        "anchor": f"lab-{n_lab}",
                        "source": f"lesson:{slug}",
                    },
                )
            )
        else:
            segments.append((kind, seg))
    prev_lesson, next_lesson = cat.lesson_neighbours(slug)
    return render(
        request,
        "lessons/lesson.html",
        {
            "lesson": lesson,
            "segments": segments,
            "prereqs": [cat.terms[p] for p in lesson.front.prerequisites if p in cat.terms],
            "prev_lesson": prev_lesson,
            "next_lesson": next_lesson,
            "where_next": [(link, _title(cat, link)) for link in lesson.front.where_next],
            "answered": progress.answered_notes(
                lesson.front.quiz, progress.last_answers(session, learner, f"lesson:{slug}")
            ),
            "done": slug in progress.marks(session, learner).lessons_done,
        },
    )


# The lab box already says "Before you run:"; a prompt that starts with it too would
# read "Before you run: Before you run: …".
_LEAD_IN = re.compile(r"^\s*before you run(?: it)?\s*:\s*", re.IGNORECASE)


def _without_lead_in(prompt: str) -> str:
    rest = _LEAD_IN.sub("", prompt, count=1)
    return rest[:1].upper() + rest[1:]


def _title(cat: Catalogue, link: str) -> str:
    area, _, slug = link.strip("/").partition("/")
    if area == "terms" and slug in cat.terms:
        return str(cat.terms[slug].title)
    if area == "lessons" and slug in cat.lessons:
        return f"Lesson {cat.lessons[slug].front.order}: {cat.lessons[slug].title}"
    if area == "labs":
        lab = get_lab(slug)
        return f"Lab: {lab.title}" if lab else link
    return link
