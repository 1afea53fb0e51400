"""Checks that span files: relations, labs, collections, quiz ids, internal links.

Each check is one small function yielding problems; ``cross_check`` runs them all."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from app.content.catalogue import Catalogue, Lesson, Term
from app.content.figures import figure_problem
from app.content.predictions import prediction_problems
from app.content.problems import Problem, line_of_text

INTERNAL_LINK_RE = re.compile(
    r'href="(/(?:terms|lessons|labs|collections|exercises)(?:/[^"#?]*)?)(?:[?#][^"]*)?"'
)

LabIds = set[str] | None  # None: labs are not checked


def _internal_links(html_text: str) -> list[str]:
    return INTERNAL_LINK_RE.findall(html_text)


def link_ok(cat: Catalogue, link: str, lab_ids: LabIds) -> bool:
    """An internal link (``/terms/x``, ``/lessons/y``, ``/labs/z``, ``/collections/c``,
    ``/exercises/e``)
    names something that exists; an area's index always does."""
    parts = link.strip("/").split("/")
    area, rest = parts[0], parts[1:]
    if not rest or rest == [""]:
        return True
    if len(rest) != 1:
        return False
    target = rest[0]
    if area == "terms":
        return target in cat.terms
    if area == "lessons":
        return target in cat.lessons
    if area == "collections":
        return target in cat.collections
    if area == "labs":
        return lab_ids is None or target in lab_ids
    if area == "exercises":
        return target in cat.exercises
    return False


def _duplicate_ids(ids: list[str]) -> list[str]:
    return sorted({i for i in ids if ids.count(i) > 1})


# --- term cards ------------------------------------------------------------------


def _term_related(cat: Catalogue, term: Term, lab_ids: LabIds) -> Iterator[Problem]:
    for i, rel_slug in enumerate(term.front.related):
        line = term.line_of.get(f"related.{i}", 2)
        if rel_slug not in cat.terms:
            yield Problem(term.path, line, f"related term '{rel_slug}' does not exist")
        elif rel_slug == term.slug:
            yield Problem(term.path, line, "a term cannot be related to itself")


def _term_one_way(cat: Catalogue, term: Term, lab_ids: LabIds) -> Iterator[Problem]:
    """A ``related_one_way`` entry explains why a link between this card and ``other``
    goes one way only (either way round): exactly one of the two cards may link the
    other. Both linking each other makes the entry stale; neither, pointless."""
    for other in term.front.related_one_way:
        line = term.line_of.get(f"related_one_way.{other}", 2)
        here = other in term.front.related
        there = other in cat.terms and term.slug in cat.terms[other].front.related
        if here and there:
            yield Problem(
                term.path,
                line,
                f"related_one_way names '{other}', but the two cards link each other: "
                "the link is two-way, drop the entry",
            )
        elif not here and not there:
            yield Problem(
                term.path,
                line,
                f"related_one_way names '{other}', but neither card links the other",
            )


def _term_collections(cat: Catalogue, term: Term, lab_ids: LabIds) -> Iterator[Problem]:
    if not cat.collections:
        return
    for i, c in enumerate(term.front.collections):
        if c not in cat.collections:
            line = term.line_of.get(f"collections.{i}", 2)
            yield Problem(term.path, line, f"collection '{c}' is not in collections.yaml")


def _term_labs(cat: Catalogue, term: Term, lab_ids: LabIds) -> Iterator[Problem]:
    if lab_ids is None:
        return
    f = term.front
    line = term.line_of.get("exercise.lab", term.line_of.get("labs", 2))
    for lab in [*f.labs, *([f.exercise.lab] if f.exercise.lab else [])]:
        if lab not in lab_ids:
            yield Problem(term.path, line, f"lab '{lab}' does not exist")


def _term_prediction(cat: Catalogue, term: Term, lab_ids: LabIds) -> Iterator[Problem]:
    """The card's lab takes its params and grades its ``numeric_prediction``."""
    ex = term.front.exercise
    if lab_ids is None or not ex.lab or ex.lab not in lab_ids:
        return
    from labs.registry import get_lab

    lab = get_lab(ex.lab)
    if lab is None:  # a test's own lab ids: nothing to check against
        return
    key = "exercise.numeric_prediction" if ex.numeric_prediction else "exercise.params"
    line = term.line_of.get(key, term.line_of.get("exercise.lab", 2))
    for message in prediction_problems(lab, dict(ex.params), ex.numeric_prediction, ex.unit):
        yield Problem(term.path, line, message)


def _term_quiz_ids(cat: Catalogue, term: Term, lab_ids: LabIds) -> Iterator[Problem]:
    for dup in _duplicate_ids([q.id for q in term.front.quiz]):
        yield Problem(term.path, term.line_of.get("quiz", 2), f"quiz id '{dup}' is used twice")


def _broken_links(
    cat: Catalogue, owner: Term | Lesson, html_texts: Iterable[str], lab_ids: LabIds
) -> Iterator[Problem]:
    for html_text in html_texts:
        for link in _internal_links(html_text):
            if not link_ok(cat, link, lab_ids):
                line = line_of_text(owner.source, link)
                yield Problem(owner.path, line, f"broken internal link {link}")


def _figures(cat: Catalogue, owner: Term | Lesson, lab_ids: LabIds) -> Iterator[Problem]:
    """Every ```figure block names a figure the catalogue has, drawn from current data."""
    for line, ref in owner.figures:
        problem = figure_problem(ref, cat.figures)
        if problem:
            yield Problem(owner.path, line, problem)


def _term_links(cat: Catalogue, term: Term, lab_ids: LabIds) -> Iterator[Problem]:
    htmls = [*term.depths_html, term.definition_html, *term.exercise_html.values()]
    return _broken_links(cat, term, htmls, lab_ids)


# --- lessons -----------------------------------------------------------------------


def _lesson_prerequisites(cat: Catalogue, lesson: Lesson, lab_ids: LabIds) -> Iterator[Problem]:
    for p in lesson.front.prerequisites:
        if p not in cat.terms:
            line = line_of_text(lesson.source, p)
            yield Problem(lesson.path, line, f"prerequisite term '{p}' does not exist")


def _lesson_labs(cat: Catalogue, lesson: Lesson, lab_ids: LabIds) -> Iterator[Problem]:
    if lab_ids is None:
        return
    embeds = [seg.lab for kind, seg in lesson.segments if kind == "lab"]
    for lab in [*lesson.front.labs, *embeds]:
        if lab not in lab_ids:
            yield Problem(
                lesson.path, line_of_text(lesson.source, lab), f"lab '{lab}' does not exist"
            )


def _lesson_where_next(cat: Catalogue, lesson: Lesson, lab_ids: LabIds) -> Iterator[Problem]:
    for link in lesson.front.where_next:
        if not link_ok(cat, link, lab_ids):
            line = line_of_text(lesson.source, link)
            yield Problem(lesson.path, line, f"where_next link {link} does not resolve")


def _lesson_links(cat: Catalogue, lesson: Lesson, lab_ids: LabIds) -> Iterator[Problem]:
    htmls = [seg for kind, seg in lesson.segments if kind == "html"]
    return _broken_links(cat, lesson, htmls, lab_ids)


def _lesson_quiz_ids(cat: Catalogue, lesson: Lesson, lab_ids: LabIds) -> Iterator[Problem]:
    for dup in _duplicate_ids([q.id for q in lesson.front.quiz]):
        yield Problem(lesson.path, 2, f"quiz id '{dup}' is used twice")


TERM_CHECKS: tuple[Callable[[Catalogue, Term, LabIds], Iterator[Problem]], ...] = (
    _term_related,
    _term_one_way,
    _term_collections,
    _term_labs,
    _term_prediction,
    _term_quiz_ids,
    _term_links,
    _figures,
)
LESSON_CHECKS: tuple[Callable[[Catalogue, Lesson, LabIds], Iterator[Problem]], ...] = (
    _lesson_prerequisites,
    _lesson_labs,
    _lesson_where_next,
    _lesson_links,
    _lesson_quiz_ids,
    _figures,
)


def cross_check(cat: Catalogue, lab_ids: LabIds) -> list[Problem]:
    """Every cross-file problem, term cards first, then lessons, in file order."""
    problems: list[Problem] = []
    for term in cat.terms.values():
        for term_check in TERM_CHECKS:
            problems.extend(term_check(cat, term, lab_ids))
    for lesson in cat.lessons.values():
        for lesson_check in LESSON_CHECKS:
            problems.extend(lesson_check(cat, lesson, lab_ids))
    return problems
