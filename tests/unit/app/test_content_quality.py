"""The real content: complete, specific, consistent, and every number it states
that code can compute agrees with the code (labs.quant, model and GPU registries)."""

from __future__ import annotations

import re

import pytest

from app.content import Fact, related_map
from labs.registry import lab_ids
from tests.catalogue import real_catalogue as catalogue

FILLER = [
    "connects through interfaces",
    "configuration, state, or dependencies",
    "lorem ipsum",
    "todo",
    "tbd",
    "in today's fast-paced",
    "plays a crucial role in various",
]
WORD = re.compile(r"[a-z0-9]+")


def shingles(text: str, n: int = 6) -> set[tuple[str, ...]]:
    words = WORD.findall(text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_glossary_size_and_collections() -> None:
    cat = catalogue()
    assert len(cat.terms) >= 60
    for cid in cat.collections:
        assert any(cid in t.front.collections for t in cat.terms.values()), cid


@pytest.mark.parametrize("slug", sorted(catalogue().terms))
def test_card_is_complete_and_specific(slug: str) -> None:
    t = catalogue().terms[slug]
    f = t.front
    assert len(f.references) >= 2, "at least two primary sources"
    assert len(f.related) >= 3, "at least three related terms"
    assert len(f.quiz) >= 3, "at least three quick-check items"
    if f.facts or any(q.fact for q in f.quiz):
        assert any(q.type == "numeric" for q in f.quiz), "a card with numbers needs a numeric item"
    text = " ".join([f.definition, *t.depths_md]).lower()
    for phrase in FILLER:
        assert not re.search(rf"\b{re.escape(phrase)}\b", text), f"filler: {phrase!r}"
    # depths must not repeat each other or the definition
    sh = [shingles(d) for d in t.depths_md]
    for i in range(len(sh)):
        for j in range(i + 1, len(sh)):
            overlap = len(sh[i] & sh[j]) / max(1, min(len(sh[i]), len(sh[j])))
            assert overlap < 0.25, f"depths {i + 1} and {j + 1} repeat each other ({overlap:.0%})"
    for i, d in enumerate(t.depths_md, 1):
        assert f.definition.lower() not in d.lower(), f"depth {i} repeats the definition verbatim"
        assert len(WORD.findall(d)) >= 60, f"depth {i} is too thin to teach"


def test_relations_are_consistent_both_ways() -> None:
    cat = catalogue()
    missing = []
    for slug, t in cat.terms.items():
        for other in t.front.related:
            back = cat.terms[other].front
            if (
                slug not in back.related
                and slug not in back.related_one_way
                and other not in t.front.related_one_way
            ):
                missing.append(f"{slug} -> {other}")
    assert missing == [], "relations without a reverse link or a reason: " + ", ".join(missing)
    assert all(len(v) >= 3 for v in related_map(cat).values())


def _facts() -> list[tuple[str, Fact]]:
    out = []
    cat = catalogue()
    for owner in [*cat.terms.values(), *cat.lessons.values()]:
        for fact in owner.front.facts:
            out.append((owner.path, fact))
        for q in owner.front.quiz:
            if q.fact:
                out.append((f"{owner.path}#{q.id}", q.fact))
    return out


@pytest.mark.parametrize(
    ("where", "fact"), _facts(), ids=lambda v: v if isinstance(v, str) else v.fn
)
def test_stated_numbers_match_the_code(where: str, fact: Fact) -> None:
    from labs.catalog.facts import evaluate

    got = evaluate(fact.fn, fact.args) * fact.scale
    assert got == pytest.approx(fact.value, rel=fact.rel, abs=fact.abs), (
        f"{where}: {fact.fn}({fact.args})"
    )


def test_quiz_answers_with_facts_match_them() -> None:
    cat = catalogue()
    for owner in [*cat.terms.values(), *cat.lessons.values()]:
        for q in owner.front.quiz:
            if q.fact:
                # A numeric key within its tolerance; a yes/no or choice key exactly.
                tolerance = getattr(q, "tolerance", 0.0)
                assert float(q.answer) == pytest.approx(q.fact.value, rel=max(tolerance, 1e-9)), (
                    f"{owner.path}#{q.id}"
                )


def test_every_lab_is_used_by_a_lesson_or_card() -> None:
    cat = catalogue()
    used = set()
    for t in cat.terms.values():
        used |= set(t.front.labs) | ({t.front.exercise.lab} if t.front.exercise.lab else set())
    for lesson in cat.lessons.values():
        used |= set(lesson.front.labs) | {s[1].lab for s in lesson.segments if s[0] == "lab"}
    assert lab_ids() - used == set()
