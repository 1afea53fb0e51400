"""Lessons link their exercises (/exercises/<id>) and such links are checked like others."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.content import load_catalogue
from labs.registry import lab_ids

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(ROOT / "content", lab_ids())


def test_every_exercise_is_loaded_and_linked_from_a_lesson(catalogue):
    folders = {p.name for p in (ROOT / "content/exercises").iterdir() if p.is_dir()}
    assert set(catalogue.exercises) == folders and len(folders) >= 16
    linked = {
        m
        for lesson in catalogue.lessons.values()
        for m in re.findall(r"\(/exercises/([\w.-]+)\)", lesson.source)
    }
    assert folders <= linked, f"exercises no lesson links: {sorted(folders - linked)}"
    for ex in catalogue.exercises.values():
        assert all(c in catalogue.terms for c in ex.concepts)


def test_exercise_links_are_found_and_checked(catalogue):
    from app.content.checks import _internal_links, link_ok

    html = '<a href="/exercises/q8_0-quantize">a</a> <a href="/exercises/no-such-exercise#x">b</a>'
    links = _internal_links(html)
    assert links == ["/exercises/q8_0-quantize", "/exercises/no-such-exercise"]
    assert [link_ok(catalogue, link, None) for link in links] == [True, False]
    assert link_ok(catalogue, "/exercises", None)  # the index
