"""The exercise catalogue, for the web app and the worker alike: every folder under
``content/exercises/`` (and, in the tests, ``extra_exercise_content``), read with the
grading kit's loader, which imports no torch."""

from __future__ import annotations

from app.settings import Settings
from labs.judge.kit import Exercise, load_all


def load_exercises(settings: Settings) -> dict[str, Exercise]:
    found: dict[str, Exercise] = {}
    for root in settings.exercise_roots:
        if (root / "exercises").is_dir():
            found.update(load_all(root))
    return found
