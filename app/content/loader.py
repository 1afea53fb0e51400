"""Reading content from disk: front matter validated by pydantic, Markdown
rendered to HTML once, and every problem reported with its file and line. The
server refuses to start on invalid content with the same messages as
``lowbit content check``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from app.content.audit_rules import check as check_audit_rules
from app.content.catalogue import Catalogue, Lesson, Term
from app.content.checks import cross_check
from app.content.figures import FigureCollector, FigureFile, load_figure_files
from app.content.markdown import render_inline, render_markdown
from app.content.problems import ContentError, Problem, key_lines, line_for
from app.content.quiz import QUIZ_TYPES
from app.content.rules import check as check_rules
from app.content.schema import DEPTHS, Collection, LabEmbed, LessonFront, TermFront

SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
LAB_FENCE_RE = re.compile(r"^```lab[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
STEP_RE = re.compile(r"^## +(.+?)\s*$", re.M)
MIN_DEPTH_CHARS = 80
EXERCISE_TEXTS = ("symptom", "predict", "next_step", "evidence")


class _Reader:
    """Collects problems while files are read; paths are shown relative to the repo."""

    def __init__(self, content_dir: Path):
        self.base = content_dir.parent
        self.problems: list[Problem] = []
        self.figure_files: dict[str, FigureFile] = load_figure_files(content_dir)
        self._figure_data: dict[str, Any] = {}  # each figure's data, computed once per load

    def figures(self, source: str) -> FigureCollector:
        """A collector for the ```figure blocks of one file."""
        return FigureCollector(self.figure_files, self._figure_data, source)

    def add_figure_errors(self, path: str, collector: FigureCollector) -> None:
        for line, message in collector.errors:
            self.add(path, line, message)

    def rel(self, p: Path) -> str:
        try:
            return str(p.relative_to(self.base))
        except ValueError:
            return str(p)

    def add(self, path: str, line: int, message: str) -> None:
        self.problems.append(Problem(path, line, message))


def _split_front(text: str) -> tuple[str, str, int]:
    """Return (yaml, body, body_first_line)."""
    if not text.startswith("---\n"):
        raise ValueError("file must start with '---' YAML front matter")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise ValueError("front matter is not closed by a '---' line")
    front = text[4 : end + 1]
    return front, text[end + 5 :], front.count("\n") + 3


def _error_loc(loc: tuple[Any, ...]) -> list[Any]:
    # pydantic adds validator names and, for quiz items, the item type to the
    # location: neither is a key in the file.
    return [
        p
        for p in loc
        if not (isinstance(p, str) and (p.startswith("function-") or p in QUIZ_TYPES))
    ]


def _parse_front(
    reader: _Reader, rel: str, text: str, model: type[BaseModel]
) -> tuple[Any, str, int, dict[tuple[Any, ...], int]] | None:
    """(validated front matter, body, body's first line, key -> line) or None."""
    try:
        front_src, body, body_line = _split_front(text)
    except ValueError as e:
        reader.add(rel, 1, str(e))
        return None
    try:
        node = yaml.compose(front_src)
        data = yaml.safe_load(front_src) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = (mark.line + 2) if mark is not None else 1
        reader.add(rel, line, f"bad YAML front matter: {getattr(e, 'problem', e)}")
        return None
    lines = key_lines(node)
    if not isinstance(data, dict):
        reader.add(rel, 2, "front matter must be a mapping")
        return None
    try:
        front = model.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            loc = _error_loc(err["loc"])
            where = ".".join(str(p) for p in loc) or "front matter"
            reader.add(rel, line_for(loc, lines, 1), f"{where}: {err['msg']}")
        return None
    return front, body, body_line, lines


def _section_line(body: str, body_line: int, title: str) -> int:
    return body_line + body[: body.find(f"## {title}")].count("\n")


def _split_depths(reader: _Reader, rel: str, body: str, body_line: int) -> list[str] | None:
    """The five depth sections' Markdown, in order, or None if they are not all there."""
    parts = re.split(r"^## +(.+?)\s*$", body, flags=re.M)
    found = [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts), 2)]
    titles = [t for t, _ in found]
    ok = True
    for depth in DEPTHS:
        if depth not in titles:
            reader.add(rel, body_line, f"missing depth section '## {depth}'")
            ok = False
    for t in [t for t in titles if t not in DEPTHS]:
        line = _section_line(body, body_line, t)
        reader.add(rel, line, f"unknown section '## {t}' (allowed: {', '.join(DEPTHS)})")
        ok = False
    if ok and titles != list(DEPTHS):
        reader.add(rel, body_line, "depth sections must appear in order: " + ", ".join(DEPTHS))
        ok = False
    if not ok:
        return None
    texts = [s.strip() for _, s in found]
    for d, t in zip(DEPTHS, texts, strict=True):
        if len(t) < MIN_DEPTH_CHARS:
            line = _section_line(body, body_line, d)
            reader.add(rel, line, f"depth '{d}' is too short to teach anything ({len(t)} chars)")
    return texts


def _lesson_segments(
    reader: _Reader, rel: str, body: str, body_line: int, figures: FigureCollector
) -> list[tuple[str, Any]]:
    """The lesson body as ("html", str), ("step", title) and ("lab", LabEmbed) parts."""
    pos = 0
    chunks: list[tuple[str, Any]] = []
    for m in LAB_FENCE_RE.finditer(body):
        chunks.append(("md", body[pos : m.start()]))
        line = body_line + body[: m.start()].count("\n")
        try:
            data = yaml.safe_load(m.group(1)) or {}
            chunks.append(("lab", LabEmbed.model_validate(data)))
        except (yaml.YAMLError, ValidationError) as e:
            reader.add(rel, line, f"bad ```lab block: {e}")
        pos = m.end()
    chunks.append(("md", body[pos:]))
    segments: list[tuple[str, Any]] = []
    for kind, chunk in chunks:
        if kind == "lab":
            segments.append(("lab", chunk))
            continue
        sub = STEP_RE.split(chunk)
        if sub[0].strip():
            segments.append(("html", render_markdown(sub[0], figures)))
        for i in range(1, len(sub), 2):
            segments.append(("step", sub[i].strip()))
            if sub[i + 1].strip():
                segments.append(("html", render_markdown(sub[i + 1], figures)))
    return segments


def _load_collections(reader: _Reader, content_dir: Path) -> dict[str, Collection]:
    collections: dict[str, Collection] = {}
    cpath = content_dir / "collections.yaml"
    if cpath.exists():
        try:
            raw = yaml.safe_load(cpath.read_text(encoding="utf-8")) or []
            for item in raw:
                c = Collection.model_validate(item)
                collections[c.id] = c
        except (yaml.YAMLError, ValidationError, TypeError) as e:
            reader.add(reader.rel(cpath), 1, f"bad collections file: {e}")
    return collections


def _load_term(reader: _Reader, path: Path) -> Term | None:
    rel, slug = reader.rel(path), path.stem
    if not SLUG_RE.match(slug):
        reader.add(rel, 1, f"file name '{slug}' is not a valid slug (lowercase, digits, hyphens)")
        return None
    source = path.read_text(encoding="utf-8")
    parsed = _parse_front(reader, rel, source, TermFront)
    if parsed is None:
        return None
    front, body, body_line, lines = parsed
    depths = _split_depths(reader, rel, body, body_line)
    if depths is None:
        return None
    ex = front.exercise
    figures = reader.figures(source)
    depths_html = [render_markdown(d, figures) for d in depths]
    reader.add_figure_errors(rel, figures)
    return Term(
        slug=slug,
        path=rel,
        front=front,
        depths_md=depths,
        depths_html=depths_html,
        definition_html=render_inline(front.definition),
        exercise_html={k: render_inline(getattr(ex, k)) for k in EXERCISE_TEXTS if getattr(ex, k)},
        line_of={".".join(map(str, k)): v + 1 for k, v in lines.items()},
        source=source,
        figures=figures.refs,
    )


def _load_terms(reader: _Reader, content_dir: Path) -> tuple[dict[str, Term], dict[str, str]]:
    """Term cards by slug, and every lower-cased title and alias -> slug (no clashes)."""
    terms: dict[str, Term] = {}
    aliases: dict[str, str] = {}
    alias_where: dict[str, str] = {}
    for path in sorted((content_dir / "terms").glob("*.md")):
        term = _load_term(reader, path)
        if term is None:
            continue
        terms[term.slug] = term
        for name in [term.front.title, *term.front.aliases]:
            key = name.strip().lower()
            if key in aliases and aliases[key] != term.slug:
                line = term.line_of.get("aliases", 2)
                reader.add(
                    term.path,
                    line,
                    f"alias or title '{name}' is already used by {alias_where[key]}",
                )
            else:
                aliases[key] = term.slug
                alias_where[key] = term.path
    for slug, term in terms.items():
        if slug in aliases and aliases[slug] != slug:
            reader.add(term.path, 1, f"slug '{slug}' collides with an alias of {alias_where[slug]}")
    return terms, aliases


def _load_lessons(reader: _Reader, content_dir: Path) -> dict[str, Lesson]:
    lessons: dict[str, Lesson] = {}
    orders: dict[int, str] = {}
    for path in sorted((content_dir / "lessons").glob("*.md")):
        rel, slug = reader.rel(path), path.stem
        if not SLUG_RE.match(slug):
            reader.add(rel, 1, f"file name '{slug}' is not a valid slug")
            continue
        source = path.read_text(encoding="utf-8")
        parsed = _parse_front(reader, rel, source, LessonFront)
        if parsed is None:
            continue
        front, body, body_line, lines = parsed
        if front.order in orders:
            line = lines.get(("order",), 1) + 1
            reader.add(rel, line, f"order {front.order} is also used by {orders[front.order]}")
        orders[front.order] = rel
        figures = reader.figures(source)
        segments = _lesson_segments(reader, rel, body, body_line, figures)
        reader.add_figure_errors(rel, figures)
        # Lessons and terms live under different URLs: a lesson may share a term's slug.
        lessons[slug] = Lesson(
            slug=slug,
            path=rel,
            front=front,
            segments=segments,
            body_md=body,
            source=source,
            figures=figures.refs,
        )
    return lessons


def _load_exercises(reader: _Reader, content_dir: Path, terms: dict[str, Term]) -> dict[str, Any]:
    """Each exercise folder's front matter (labs.judge.kit; torch-free). Running the
    reference solutions is ``lowbit content check``'s job (labs.judge.check)."""
    from labs.judge.kit import ExerciseError, load_exercise

    root = content_dir / "exercises"
    exercises: dict[str, Any] = {}
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for folder in folders:
        if folder.name.startswith(("_", ".")):
            continue
        readme = reader.rel(folder / "README.md")
        try:
            ex = load_exercise(folder)
        except ExerciseError as e:
            reader.add(readme, 1, str(e))
            continue
        for slug in ex.concepts:
            if slug not in terms:
                reader.add(readme, 1, f"concept {slug!r} is not a term card")
        exercises[ex.id] = ex
    return exercises


def load_catalogue(content_dir: Path, lab_ids: set[str] | None = None) -> Catalogue:
    """Load and cross-check all content; raise ContentError listing every problem.

    ``lab_ids``: the registered labs content may name (None: not checked)."""
    reader = _Reader(content_dir)
    collections = _load_collections(reader, content_dir)
    terms, aliases = _load_terms(reader, content_dir)
    lessons = _load_lessons(reader, content_dir)
    cat = Catalogue(
        terms=terms,
        lessons=lessons,
        collections=collections,
        aliases=aliases,
        figures=reader.figure_files,
        exercises=_load_exercises(reader, content_dir, terms),
    )
    reader.problems.extend(cross_check(cat, lab_ids))
    reader.problems.extend(check_rules(cat))  # claims the registries decide (issue 15)
    reader.problems.extend(check_audit_rules(cat))  # recall prompts, stale claims (issue 23)
    if reader.problems:
        raise ContentError(reader.problems)
    return cat
