"""The real content (content/), loaded once per test session.

Loading and rendering every card takes seconds; tests that read the real
catalogue share this one, and so do the apps tests create over it (see the
``shared_real_catalogue`` fixture in tests/conftest.py)."""

from __future__ import annotations

from functools import cache

from app.content import Catalogue, load_catalogue
from app.settings import ROOT
from labs.registry import lab_ids

CONTENT_DIR = ROOT / "content"


@cache
def real_catalogue() -> Catalogue:
    return load_catalogue(CONTENT_DIR, lab_ids())
