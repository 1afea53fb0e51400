"""Lessons link their exercises (/exercises/<id>) and such links are checked like others."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.content import ContentError, load_catalogue
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


def test_a_link_to_an_unknown_exercise_is_a_problem(tmp_path):
    import shutil

    content = tmp_path / "content"
    shutil.copytree(ROOT / "content", content)
    lesson = content / "lessons/dot-product-scales.md"
    lesson.write_text(lesson.read_text() + "\nSee [this](/exercises/no-such-exercise).\n")
    with pytest.raises(ContentError) as err:
        load_catalogue(content, lab_ids())
    assert any("/exercises/no-such-exercise" in p.message for p in err.value.problems), (
        err.value.problems
    )
