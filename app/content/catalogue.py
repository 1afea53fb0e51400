"""The loaded catalogue: term cards, lessons and collections, with every derived
view the pages need (sorted lists, neighbours, back-links, terminology maps)
computed once when content loads, never per request."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from app.content.figures import FigureFile, FigureRef
from app.content.quiz import QuizItemBase
from app.content.schema import Collection, LessonFront, TermFront
from app.termmap import Node, term_map


@dataclass(eq=False)
class Term:
    slug: str
    path: str
    front: TermFront
    depths_md: list[str]
    depths_html: list[str]
    definition_html: str
    exercise_html: dict[str, str]
    line_of: dict[str, int] = field(default_factory=dict)
    source: str = ""
    figures: list[tuple[int, FigureRef]] = field(default_factory=list)  # (line, ```figure)

    @property
    def title(self) -> str:
        return self.front.title


@dataclass(eq=False)
class Lesson:
    slug: str
    path: str
    front: LessonFront
    segments: list[tuple[str, Any]]  # ("html", str) | ("lab", LabEmbed) | ("step", title)
    body_md: str
    source: str = ""
    figures: list[tuple[int, FigureRef]] = field(default_factory=list)  # (line, ```figure)

    @property
    def title(self) -> str:
        return self.front.title


@dataclass(eq=False)
class Catalogue:
    terms: dict[str, Term]
    lessons: dict[str, Lesson]
    collections: dict[str, Collection]
    aliases: dict[str, str]  # lower-cased alias or title -> slug
    figures: dict[str, FigureFile] = field(default_factory=dict)  # content/figures/*.svg
    # content/exercises/<id>/: labs.judge.kit.Exercise by id (front matter only, no torch)
    exercises: dict[str, Any] = field(default_factory=dict)
    # Rendered fragments the web layer keeps per catalogue (see routes/terms.py):
    # filled once per card, dropped with the catalogue when content reloads.
    rendered: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._terms = tuple(sorted(self.terms.values(), key=lambda t: t.title.lower()))
        self._lessons = tuple(sorted(self.lessons.values(), key=lambda s: s.front.order))
        self._term_index = {t.slug: i for i, t in enumerate(self._terms)}
        self._lesson_index = {s.slug: i for i, s in enumerate(self._lessons)}
        self._lessons_using: dict[str, tuple[Lesson, ...]] = {
            slug: tuple(s for s in self._lessons if slug in s.front.prerequisites)
            for slug in self.terms
        }
        back: dict[str, list[str]] = {slug: [] for slug in self.terms}
        for slug in sorted(self.terms):
            for other in self.terms[slug].front.related:
                if other in back and other != slug:
                    back[other].append(slug)
        titles = {slug: t.title for slug, t in self.terms.items()}
        self._maps = {
            slug: term_map(slug, t.front.related, back[slug], titles)
            for slug, t in self.terms.items()
        }
        # The list under the map names every relation; the map itself shows the first 12.
        self._related = {
            slug: term_map(slug, t.front.related, back[slug], titles, limit=len(self.terms))
            for slug, t in self.terms.items()
        }
        self._names = {t.title.lower(): t.slug for t in self.terms.values()}
        self._names.update({s: s for s in self.terms})
        self._names.update(self.aliases)

    def term_by_name(self, name: str) -> Term | None:
        slug = self.aliases.get(name.strip().lower())
        return self.terms.get(slug) if slug else self.terms.get(name)

    def sorted_terms(self) -> tuple[Term, ...]:
        """Every term, A to Z by title."""
        return self._terms

    def sorted_lessons(self) -> tuple[Lesson, ...]:
        """Every lesson in its ``order``."""
        return self._lessons

    def term_neighbours(self, slug: str) -> tuple[Term | None, Term | None]:
        """The terms before and after ``slug`` A to Z (None at either end)."""
        return _neighbours(self._terms, self._term_index[slug])

    def lesson_neighbours(self, slug: str) -> tuple[Lesson | None, Lesson | None]:
        """The lessons before and after ``slug`` in order (None at either end)."""
        return _neighbours(self._lessons, self._lesson_index[slug])

    def lessons_using(self, slug: str) -> tuple[Lesson, ...]:
        """Lessons that list the term among their prerequisites, in order."""
        return self._lessons_using.get(slug, ())

    def term_map(self, slug: str) -> list[Node]:
        """The terminology map of one card (see ``app.termmap``)."""
        return self._maps[slug]

    def related_terms(self, slug: str) -> list[Node]:
        """Every term ``slug`` relates to, then every term that names it: the map's
        nodes first, without the map's limit."""
        return self._related[slug]

    def quiz_item(self, owner: str, item_id: str) -> QuizItemBase | None:
        kind, _, slug = owner.partition(":")
        obj: Term | Lesson | None = (
            self.terms.get(slug)
            if kind == "term"
            else self.lessons.get(slug)
            if kind == "lesson"
            else None
        )
        if obj is None:
            return None
        return next((q for q in obj.front.quiz if q.id == item_id), None)

    def closest_terms(self, query: str, n: int = 5) -> list[Term]:
        names = list(self._names)
        hits = difflib.get_close_matches(
            query.lower().replace("-", " "), names, n=n * 2, cutoff=0.4
        )
        hits += difflib.get_close_matches(query.lower(), names, n=n * 2, cutoff=0.4)
        seen: list[str] = []
        for h in hits:
            s = self._names[h]
            if s not in seen:
                seen.append(s)
        return [self.terms[s] for s in seen[:n]]


def _neighbours(items: tuple[Any, ...], i: int) -> tuple[Any, Any]:
    return (items[i - 1] if i > 0 else None, items[i + 1] if i + 1 < len(items) else None)


def related_map(cat: Catalogue) -> dict[str, set[str]]:
    """Undirected relation map: a term and every term that names it or it names."""
    out: dict[str, set[str]] = {s: set(t.front.related) for s, t in cat.terms.items()}
    for s, t in cat.terms.items():
        for r in t.front.related:
            out.setdefault(r, set()).add(s)
    return out
