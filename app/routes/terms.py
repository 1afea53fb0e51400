"""Term cards: the index (A–Z, by domain, by collection), one card, collections, and
the cards' figures (committed SVGs under content-hashed URLs)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse
from jinja2 import Template
from markupsafe import Markup

from app import progress, routes
from app.content import DEPTHS, Catalogue, QuizItemBase, Term
from app.deps import CatalogueDep, LearnerDep, SessionDep
from app.templating import render, render_once, templates
from app.termmap import WIDTH

router = routes.router(tags=["terms"])

DOMAIN_TITLES = {
    "numerics": "Numerics and formats",
    "methods": "Methods",
    "memory": "Memory and capacity",
    "hardware": "Hardware and kernels",
    "serving": "Serving and models",
    "economy": "Infrastructure, markets and the economy",
    "society": "Ethics, safety and society",
}


@router.get("/terms", response_class=HTMLResponse)
def terms_index(
    request: Request,
    cat: CatalogueDep,
    session: SessionDep,
    learner: LearnerDep,
    view: str = "az",
) -> HTMLResponse:
    if view not in ("az", "domain", "collection"):
        view = "az"
    terms = cat.sorted_terms()
    groups: dict[str, list] = defaultdict(list)
    if view == "az":
        for t in terms:
            first = t.title[0].upper()
            groups[first if first.isalpha() else "#"].append(t)
        titles = {k: k for k in groups}
    elif view == "domain":
        for t in terms:
            groups[t.front.domain].append(t)
        titles = {k: DOMAIN_TITLES.get(k, k.title()) for k in groups}
    else:
        for c in cat.collections:
            groups[c] = [t for t in terms if c in t.front.collections]
        titles = {k: cat.collections[k].title for k in groups}
    order = (
        sorted(groups, key=lambda k: list(DOMAIN_TITLES).index(k) if k in DOMAIN_TITLES else 99)
        if view == "domain"
        else (list(cat.collections) if view == "collection" else sorted(groups))
    )
    sections = [(k, titles[k], groups[k]) for k in order if groups.get(k)]
    return render(
        request,
        "terms/index.html",
        {
            "sections": sections,
            "view": view,
            "count": len(terms),
            "letters": sorted(groups) if view == "az" else [],
            "marks": progress.marks(session, learner),
        },
        block_name="listing",
    )


def _depth(raw: str | None) -> tuple[int, str | None]:
    """Parse ?depth=; anything invalid falls back to 1 with a note for the reader."""
    if raw is None or raw == "":
        return 1, None
    try:
        d = int(raw)
    except ValueError:
        return 1, f"'{raw[:20]}' is not a depth; showing depth 1 (depths are 1 to 5)."
    if not 1 <= d <= len(DEPTHS):
        return 1, f"There is no depth {d}; showing depth 1 (depths are 1 to 5)."
    return d, None


CARD_PARTS = (
    "terms/_card_header.html",
    "terms/_card_toc.html",
    "terms/_card_exercise.html",
    "terms/_card_after_quiz.html",
)
QUIZ_FORM = "_quiz_form.html"


@dataclass(frozen=True)
class QuizForm:
    """One quick-check form's cached parts: term.html renders the learner's part
    (answered note, CSRF token) between ``head`` and ``tail``."""

    item: QuizItemBase
    head: Markup
    tail: Markup


@dataclass(frozen=True)
class CardParts:
    """The fragments of a term page that no request changes, rendered once per card;
    terms/term.html composes them with the parts that are per request."""

    header: Markup
    toc: Markup
    exercise: Markup
    quiz: tuple[QuizForm, ...]
    after_quiz: Markup
    sources: tuple[Template, ...]

    @property
    def fresh(self) -> bool:
        """False once a part's template file changed (Jinja reloads templates on
        change; partials they include are not watched: a content edit re-renders)."""
        return all(t.is_up_to_date for t in self.sources)


def _card_parts(cat: Catalogue, term: Term) -> CardParts:
    key = f"term-card:{term.slug}"
    parts: CardParts | None = cat.rendered.get(key)
    if parts is None or not parts.fresh:  # once per card and catalogue
        prev_term, next_term = cat.term_neighbours(term.slug)
        ctx = {
            "term": term,
            "nodes": cat.term_map(term.slug),
            "related": cat.related_terms(term.slug),
            "map_w": WIDTH,
            "collections": [
                cat.collections[c] for c in term.front.collections if c in cat.collections
            ],
            "prev_term": prev_term,
            "next_term": next_term,
            "lessons": cat.lessons_using(term.slug),
        }
        header, toc, exercise, after_quiz = (
            render_once(templates.get_template(name), ctx) for name in CARD_PARTS
        )
        form = templates.get_template(QUIZ_FORM)
        macros: Any = form.module  # the template's macros, callable from Python
        owner = f"term:{term.slug}"
        quiz = tuple(
            QuizForm(item, macros.head(owner, item), macros.tail(owner, item))
            for item in term.front.quiz
        )
        sources = (*(templates.get_template(name) for name in CARD_PARTS), form)
        parts = CardParts(header, toc, exercise, quiz, after_quiz, sources)
        cat.rendered[key] = parts
    return parts


@router.get("/terms/{slug}", response_class=HTMLResponse)
def term_page(
    request: Request,
    slug: str,
    cat: CatalogueDep,
    session: SessionDep,
    learner: LearnerDep,
    depth: str | None = None,
) -> HTMLResponse:
    term = cat.terms.get(slug)
    if term is None:
        other = cat.term_by_name(slug.replace("-", " "))
        request.state.suggestions = [other] if other else cat.closest_terms(slug)
        raise HTTPException(404, f"No term card called '{slug[:80]}'.")
    d, note = _depth(depth)
    parts = _card_parts(cat, term)
    owner = f"term:{term.slug}"
    notes = progress.answered_notes(term.front.quiz, progress.last_answers(session, learner, owner))
    practice = [ex for ex in request.app.state.exercises.values() if term.slug in ex.concepts]
    ctx = {"term": term, "depth": d, "depth_note": note, "depths": DEPTHS, "card": parts}
    ctx["answered"] = notes
    ctx["practice"] = practice  # the exercises that practise this card's concept
    return render(request, "terms/term.html", ctx, block_name="depths")


@router.get("/collections/{cid}", response_class=HTMLResponse)
def collection_page(request: Request, cid: str, cat: CatalogueDep) -> HTMLResponse:
    coll = cat.collections.get(cid)
    if coll is None:
        raise HTTPException(404, f"No collection called '{cid[:80]}'.")
    terms = [t for t in cat.sorted_terms() if cid in t.front.collections]
    return render(request, "terms/collection.html", {"collection": coll, "terms": terms})


FIGURE_IMMUTABLE = "public, max-age=31536000, immutable"


@router.get("/figures/{file_name}", include_in_schema=False)
def figure_file(file_name: str, cat: CatalogueDep) -> FileResponse:
    """A card figure: ``<name>.<digest>.svg`` is cached for a year (the digest changes
    with the file); ``<name>.svg`` for a minute. Only figures the catalogue loaded."""
    stem, _, ext = file_name.rpartition(".")
    name, _, digest = stem.partition(".")
    fig = cat.figures.get(name)
    if ext != "svg" or fig is None or (digest and digest != fig.digest):
        raise HTTPException(404, "No such figure")
    cache = FIGURE_IMMUTABLE if digest else "public, max-age=60"
    return FileResponse(fig.path, media_type="image/svg+xml", headers={"Cache-Control": cache})
