"""Content catalogue: term cards, lessons and collections.

Markdown with YAML front matter, validated by pydantic and rendered to HTML once,
at load (``loader``); every problem names its file and line (``problems``). The
models are in ``schema`` and ``quiz`` (one class per quick-check type), the
cross-file checks in ``checks``, the loaded catalogue and its precomputed views
in ``catalogue``, and the reloading holder the web app serves from in ``store``.
"""

from app.content.base import Fact
from app.content.catalogue import Catalogue, Lesson, Term, related_map
from app.content.loader import load_catalogue
from app.content.problems import ContentError, Problem
from app.content.quiz import QuizItem, QuizItemBase, parse_quiz_item
from app.content.schema import DEPTHS, Collection, Exercise, LessonFront, TermFront
from app.content.store import ContentStore

__all__ = [
    "DEPTHS",
    "Catalogue",
    "Collection",
    "ContentError",
    "ContentStore",
    "Exercise",
    "Fact",
    "Lesson",
    "LessonFront",
    "Problem",
    "QuizItem",
    "QuizItemBase",
    "Term",
    "TermFront",
    "load_catalogue",
    "parse_quiz_item",
    "related_map",
]
