"""Content catalogue: term cards, lessons and collections.

Markdown with YAML front matter is validated by pydantic and rendered to HTML
once, at load. Every problem is reported with its file and line; the server
refuses to start on invalid content with the same messages as
``lowbit content check``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from markdown_it import MarkdownIt
from mdit_py_plugins.anchors import anchors_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEPTHS: tuple[str, ...] = (
    "Orientation",
    "Practical use",
    "Technical understanding",
    "Operations and debugging",
    "Deep dive",
)
SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
INTERNAL_LINK_RE = re.compile(
    r'href="(/(?:terms|lessons|labs|collections)(?:/[^"#?]*)?)(?:[?#][^"]*)?"'
)


class ContentError(Exception):
    """Invalid content; ``problems`` lists ``file:line: message`` strings."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


# --- front matter models -----------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Reference(_Strict):
    title: str = Field(min_length=3)
    url: str = Field(pattern=r"^https://\S+$")
    note: str | None = None


class Fact(_Strict):
    """A number the text states that code can compute (see ``labs.facts``)."""

    fn: str
    args: dict[str, Any] = {}
    value: float
    scale: float = Field(
        1.0, description="multiplies fn's result before comparing (e.g. 1e-9 for bytes -> GB)"
    )
    rel: float = Field(1e-6, ge=0)
    abs: float = Field(0.0, ge=0)


class QuizItem(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    type: Literal["single", "multiple", "numeric", "ordering", "free"]
    prompt: str = Field(min_length=8)
    choices: list[str] = []
    answer: Any = None
    tolerance: float = Field(0.0, ge=0)
    tolerance_mode: Literal["abs", "rel"] = "rel"
    unit: str | None = None
    explanation: str = Field(min_length=8)
    depth: int = Field(1, ge=1, le=5)
    model_answer: str | None = None
    rubric: list[str] = []
    fact: Fact | None = None

    @model_validator(mode="after")
    def _shape(self) -> QuizItem:
        n = len(self.choices)
        if self.type == "single":
            if n < 2 or not isinstance(self.answer, int) or not 0 <= self.answer < n:
                raise ValueError("single: needs >= 2 choices and answer = index of the right one")
        elif self.type == "multiple":
            ok = (
                isinstance(self.answer, list)
                and self.answer
                and all(isinstance(a, int) and 0 <= a < n for a in self.answer)
            )
            if n < 2 or not ok:
                raise ValueError("multiple: needs >= 2 choices and answer = list of right indexes")
        elif self.type == "ordering":
            if n < 2 or sorted(self.answer or []) != list(range(n)):
                raise ValueError("ordering: answer must be a permutation of the choice indexes")
        elif self.type == "numeric":
            if isinstance(self.answer, bool) or not isinstance(self.answer, int | float):
                raise ValueError("numeric: answer must be a number")
            if self.unit is None:
                raise ValueError("numeric: give the unit (use '' for a pure number)")
        elif self.type == "free" and not self.model_answer:
            raise ValueError("free: needs model_answer (and a rubric)")
        return self


class Exercise(_Strict):
    symptom: str = Field(min_length=10)
    predict: str = Field(min_length=10)
    lab: str | None = None
    params: dict[str, Any] = {}
    command: str | None = None
    next_step: str = Field(min_length=10)
    evidence: str | None = None
    numeric_prediction: str | None = Field(
        None, description="Key of the lab result's metric the learner predicts numerically"
    )
    unit: str | None = None

    @model_validator(mode="after")
    def _lab_or_command(self) -> Exercise:
        if not self.lab and not self.command:
            raise ValueError("exercise needs a lab or a command")
        return self


class TermFront(_Strict):
    title: str = Field(min_length=2)
    aliases: list[str] = []
    domain: str = Field(min_length=2)
    collections: list[str] = Field(min_length=1)
    definition: str = Field(min_length=20, max_length=400)
    references: list[Reference] = Field(min_length=1)
    related: list[str] = []
    related_one_way: dict[str, str] = Field(
        {}, description="related slug -> why the link is deliberately one-way"
    )
    labs: list[str] = []
    exercise: Exercise
    quiz: list[QuizItem] = []
    facts: list[Fact] = []

    @field_validator("definition")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if "\n" in v.strip():
            raise ValueError("definition must be one line")
        return v.strip()


class Step(_Strict):
    title: str
    html: str


class LabEmbed(_Strict):
    lab: str
    params: dict[str, Any] = {}
    prompt: str | None = None


class LessonFront(_Strict):
    title: str = Field(min_length=2)
    order: int = Field(ge=1)
    summary: str = Field(min_length=20)
    goal: str = Field(min_length=20)
    prerequisites: list[str] = []
    labs: list[str] = []
    minutes: int = Field(20, ge=1)
    quiz: list[QuizItem] = []
    facts: list[Fact] = []
    where_next: list[str] = []


class Collection(_Strict):
    id: str
    title: str
    description: str
    keep_in_view: bool = False


# --- catalogue objects ---------------------------------------------------------


@dataclass
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

    @property
    def title(self) -> str:
        return self.front.title

    def plain_text(self) -> str:
        return "\n".join(self.depths_md)


@dataclass
class Lesson:
    slug: str
    path: str
    front: LessonFront
    segments: list[tuple[str, Any]]  # ("html", str) | ("lab", LabEmbed) | ("step", title)
    body_md: str
    source: str = ""

    @property
    def title(self) -> str:
        return self.front.title


@dataclass
class Catalogue:
    terms: dict[str, Term]
    lessons: dict[str, Lesson]
    collections: dict[str, Collection]
    aliases: dict[str, str]  # lower-cased alias or title -> slug

    def term_by_name(self, name: str) -> Term | None:
        slug = self.aliases.get(name.strip().lower())
        return self.terms.get(slug) if slug else self.terms.get(name)

    def sorted_terms(self) -> list[Term]:
        return sorted(self.terms.values(), key=lambda t: t.title.lower())

    def sorted_lessons(self) -> list[Lesson]:
        return sorted(self.lessons.values(), key=lambda lesson: lesson.front.order)

    def quiz_item(self, owner: str, item_id: str) -> QuizItem | None:
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
        import difflib

        names = {t.title.lower(): t.slug for t in self.terms.values()}
        names.update({s: s for s in self.terms})
        names.update(self.aliases)
        hits = difflib.get_close_matches(
            query.lower().replace("-", " "), list(names), n=n * 2, cutoff=0.4
        )
        hits += difflib.get_close_matches(query.lower(), list(names), n=n * 2, cutoff=0.4)
        seen: list[str] = []
        for h in hits:
            s = names[h]
            if s not in seen:
                seen.append(s)
        return [self.terms[s] for s in seen[:n]]


# --- Markdown ------------------------------------------------------------------


def _math(content: str, display: bool) -> str:
    from latex2mathml.converter import convert

    try:
        return convert(content, display="block" if display else "inline")
    except Exception:  # an unparsable formula shows as code, the checker reports it
        return f"<code>{html.escape(content)}</code>"


def make_markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "typographer": True}).enable("table")
    md.use(dollarmath_plugin, allow_space=True, double_inline=True)
    md.use(anchors_plugin, min_level=3, max_level=3, permalink=False)
    md.add_render_rule(
        "math_inline", lambda self, tokens, idx, options, env: _math(tokens[idx].content, False)
    )
    md.add_render_rule(
        "math_block",
        lambda self, tokens, idx, options, env: _math(tokens[idx].content, True) + "\n",
    )
    md.add_render_rule(
        "math_block_label",
        lambda self, tokens, idx, options, env: _math(tokens[idx].content, True) + "\n",
    )
    return md


_MD = make_markdown()


def render_markdown(text: str) -> str:
    """Markdown to HTML (raw HTML disabled, so content can never inject script)."""
    out: str = _MD.render(text)
    return out


def render_inline(text: str) -> str:
    out: str = _MD.renderInline(text)
    return out


# --- loading -------------------------------------------------------------------


def _split_front(text: str) -> tuple[str, str, int]:
    """Return (yaml, body, body_first_line)."""
    if not text.startswith("---\n"):
        raise ValueError("file must start with '---' YAML front matter")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise ValueError("front matter is not closed by a '---' line")
    front = text[4 : end + 1]
    return front, text[end + 5 :], front.count("\n") + 3


def _key_lines(node: yaml.Node | None, prefix: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], int]:
    """Map every key path in a YAML node tree to its 1-based line."""
    out: dict[tuple[Any, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            path = (*prefix, k.value)
            out[path] = k.start_mark.line + 1
            out.update(_key_lines(v, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            path = (*prefix, i)
            out[path] = v.start_mark.line + 1
            out.update(_key_lines(v, path))
    return out


def _line_for(loc: Iterable[Any], lines: dict[tuple[Any, ...], int], offset: int) -> int:
    path = tuple(loc)
    while path:
        if path in lines:
            return lines[path] + offset
        path = path[:-1]
    return 1 + offset


def _parse_front(
    path: Path, rel: str, model: type[BaseModel], problems: list[Problem]
) -> tuple[Any, str, int, dict[tuple[Any, ...], int]] | None:
    text = path.read_text(encoding="utf-8")
    try:
        front_src, body, body_line = _split_front(text)
    except ValueError as e:
        problems.append(Problem(rel, 1, str(e)))
        return None
    try:
        node = yaml.compose(front_src)
        data = yaml.safe_load(front_src) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = (mark.line + 2) if mark is not None else 1
        problems.append(Problem(rel, line, f"bad YAML front matter: {getattr(e, 'problem', e)}"))
        return None
    lines = _key_lines(node)
    if not isinstance(data, dict):
        problems.append(Problem(rel, 2, "front matter must be a mapping"))
        return None
    try:
        front = model.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
            where = ".".join(str(p) for p in loc) or "front matter"
            problems.append(Problem(rel, _line_for(loc, lines, 1), f"{where}: {err['msg']}"))
        return None
    return front, body, body_line, lines


def _split_depths(body: str, body_line: int, rel: str, problems: list[Problem]) -> list[str] | None:
    parts = re.split(r"^## +(.+?)\s*$", body, flags=re.M)
    found = [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts), 2)]
    titles = [t for t, _ in found]
    ok = True
    for depth in DEPTHS:
        if depth not in titles:
            problems.append(Problem(rel, body_line, f"missing depth section '## {depth}'"))
            ok = False
    extra = [t for t in titles if t not in DEPTHS]
    for t in extra:
        line = body_line + body[: body.find(f"## {t}")].count("\n")
        problems.append(
            Problem(rel, line, f"unknown section '## {t}' (allowed: {', '.join(DEPTHS)})")
        )
        ok = False
    if ok and titles != list(DEPTHS):
        problems.append(
            Problem(rel, body_line, "depth sections must appear in order: " + ", ".join(DEPTHS))
        )
        ok = False
    if not ok:
        return None
    texts = [s.strip() for _, s in found]
    for d, t in zip(DEPTHS, texts, strict=True):
        if len(t) < 80:
            line = body_line + body[: body.find(f"## {d}")].count("\n")
            problems.append(
                Problem(rel, line, f"depth '{d}' is too short to teach anything ({len(t)} chars)")
            )
    return texts


LAB_FENCE_RE = re.compile(r"^```lab[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
STEP_RE = re.compile(r"^## +(.+?)\s*$", re.M)


def _lesson_segments(
    body: str, body_line: int, rel: str, problems: list[Problem]
) -> list[tuple[str, Any]]:
    segments: list[tuple[str, Any]] = []
    pos = 0
    chunks: list[tuple[str, Any]] = []
    for m in LAB_FENCE_RE.finditer(body):
        chunks.append(("md", body[pos : m.start()]))
        line = body_line + body[: m.start()].count("\n")
        try:
            data = yaml.safe_load(m.group(1)) or {}
            chunks.append(("lab", LabEmbed.model_validate(data)))
        except (yaml.YAMLError, ValidationError) as e:
            problems.append(Problem(rel, line, f"bad ```lab block: {e}"))
        pos = m.end()
    chunks.append(("md", body[pos:]))
    for kind, chunk in chunks:
        if kind == "lab":
            segments.append(("lab", chunk))
            continue
        sub = STEP_RE.split(chunk)
        if sub[0].strip():
            segments.append(("html", render_markdown(sub[0])))
        for i in range(1, len(sub), 2):
            segments.append(("step", sub[i].strip()))
            if sub[i + 1].strip():
                segments.append(("html", render_markdown(sub[i + 1])))
    return segments


def load_catalogue(content_dir: Path, lab_ids: set[str] | None = None) -> Catalogue:
    """Load and cross-check all content; raise ContentError listing every problem."""
    problems: list[Problem] = []
    base = content_dir.parent

    def rel(p: Path) -> str:
        try:
            return str(p.relative_to(base))
        except ValueError:
            return str(p)

    collections: dict[str, Collection] = {}
    cpath = content_dir / "collections.yaml"
    if cpath.exists():
        try:
            raw = yaml.safe_load(cpath.read_text(encoding="utf-8")) or []
            for item in raw:
                c = Collection.model_validate(item)
                collections[c.id] = c
        except (yaml.YAMLError, ValidationError, TypeError) as e:
            problems.append(Problem(rel(cpath), 1, f"bad collections file: {e}"))

    terms: dict[str, Term] = {}
    aliases: dict[str, str] = {}
    alias_where: dict[str, str] = {}
    for path in sorted((content_dir / "terms").glob("*.md")):
        r = rel(path)
        slug = path.stem
        if not SLUG_RE.match(slug):
            problems.append(
                Problem(
                    r, 1, f"file name '{slug}' is not a valid slug (lowercase, digits, hyphens)"
                )
            )
            continue
        parsed = _parse_front(path, r, TermFront, problems)
        if parsed is None:
            continue
        front, body, body_line, lines = parsed
        depths = _split_depths(body, body_line, r, problems)
        if depths is None:
            continue
        ex = front.exercise
        exercise_html = {
            k: render_inline(getattr(ex, k))
            for k in ("symptom", "predict", "next_step", "evidence")
            if getattr(ex, k)
        }
        term = Term(
            slug=slug,
            path=r,
            front=front,
            depths_md=depths,
            depths_html=[render_markdown(d) for d in depths],
            definition_html=render_inline(front.definition),
            exercise_html=exercise_html,
            line_of={".".join(map(str, k)): v + 1 for k, v in lines.items()},
            source=path.read_text(encoding="utf-8"),
        )
        terms[slug] = term
        for name in [front.title, *front.aliases]:
            key = name.strip().lower()
            if key in aliases and aliases[key] != slug:
                problems.append(
                    Problem(
                        r,
                        term.line_of.get("aliases", 2),
                        f"alias or title '{name}' is already used by {alias_where[key]}",
                    )
                )
            else:
                aliases[key] = slug
                alias_where[key] = r
    for slug, term in terms.items():
        if slug in aliases and aliases[slug] != slug:
            problems.append(
                Problem(
                    term.path, 1, f"slug '{slug}' collides with an alias of {alias_where[slug]}"
                )
            )

    lessons: dict[str, Lesson] = {}
    orders: dict[int, str] = {}
    for path in sorted((content_dir / "lessons").glob("*.md")):
        r = rel(path)
        slug = path.stem
        if not SLUG_RE.match(slug):
            problems.append(Problem(r, 1, f"file name '{slug}' is not a valid slug"))
            continue
        parsed = _parse_front(path, r, LessonFront, problems)
        if parsed is None:
            continue
        front, body, body_line, lines = parsed
        if front.order in orders:
            problems.append(
                Problem(
                    r,
                    lines.get(("order",), 1) + 1,
                    f"order {front.order} is also used by {orders[front.order]}",
                )
            )
        orders[front.order] = r
        segments = _lesson_segments(body, body_line, r, problems)
        lessons[slug] = Lesson(
            slug=slug,
            path=r,
            front=front,
            segments=segments,
            body_md=body,
            source=path.read_text(encoding="utf-8"),
        )
        if slug in terms:
            pass  # lessons and terms live under different URLs; no clash

    cat = Catalogue(terms=terms, lessons=lessons, collections=collections, aliases=aliases)
    problems.extend(cross_check(cat, lab_ids))
    from app.content_rules import check as check_rules  # claims the registries decide (issue 15)

    problems.extend(check_rules(cat))
    if problems:
        raise ContentError(problems)
    return cat


def line_of_text(source: str, needle: str) -> int:
    """1-based line of the first occurrence of ``needle`` in a file (1 if absent)."""
    i = source.find(needle)
    return source.count("\n", 0, i) + 1 if i >= 0 else 1


def _internal_links(html_text: str) -> list[str]:
    return INTERNAL_LINK_RE.findall(html_text)


def _link_ok(cat: Catalogue, link: str, lab_ids: set[str] | None) -> bool:
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
    return False


def cross_check(cat: Catalogue, lab_ids: set[str] | None) -> list[Problem]:
    """Checks that span files: relations, labs, collections, internal links."""
    problems: list[Problem] = []
    for term in cat.terms.values():
        f = term.front
        for i, rel_slug in enumerate(f.related):
            if rel_slug not in cat.terms:
                problems.append(
                    Problem(
                        term.path,
                        term.line_of.get(f"related.{i}", 2),
                        f"related term '{rel_slug}' does not exist",
                    )
                )
            elif rel_slug == term.slug:
                problems.append(
                    Problem(
                        term.path,
                        term.line_of.get(f"related.{i}", 2),
                        "a term cannot be related to itself",
                    )
                )
        for i, c in enumerate(f.collections):
            if cat.collections and c not in cat.collections:
                problems.append(
                    Problem(
                        term.path,
                        term.line_of.get(f"collections.{i}", 2),
                        f"collection '{c}' is not in collections.yaml",
                    )
                )
        labs = list(f.labs) + ([f.exercise.lab] if f.exercise.lab else [])
        if lab_ids is not None:
            for lab in labs:
                if lab not in lab_ids:
                    problems.append(
                        Problem(
                            term.path,
                            term.line_of.get("exercise.lab", term.line_of.get("labs", 2)),
                            f"lab '{lab}' does not exist",
                        )
                    )
        ids = [q.id for q in f.quiz]
        for dup in {i for i in ids if ids.count(i) > 1}:
            problems.append(
                Problem(term.path, term.line_of.get("quiz", 2), f"quiz id '{dup}' is used twice")
            )
        for depth_html in [*term.depths_html, term.definition_html, *term.exercise_html.values()]:
            for link in _internal_links(depth_html):
                if not _link_ok(cat, link, lab_ids):
                    problems.append(
                        Problem(
                            term.path,
                            line_of_text(term.source, link),
                            f"broken internal link {link}",
                        )
                    )
    for lesson in cat.lessons.values():
        lf = lesson.front
        for p in lf.prerequisites:
            if p not in cat.terms:
                problems.append(
                    Problem(
                        lesson.path,
                        line_of_text(lesson.source, p),
                        f"prerequisite term '{p}' does not exist",
                    )
                )
        embeds = [s[1].lab for s in lesson.segments if s[0] == "lab"]
        if lab_ids is not None:
            for lab in [*lf.labs, *embeds]:
                if lab not in lab_ids:
                    problems.append(
                        Problem(
                            lesson.path,
                            line_of_text(lesson.source, lab),
                            f"lab '{lab}' does not exist",
                        )
                    )
        for link in lf.where_next:
            if not _link_ok(cat, link, lab_ids):
                problems.append(
                    Problem(
                        lesson.path,
                        line_of_text(lesson.source, link),
                        f"where_next link {link} does not resolve",
                    )
                )
        for kind, seg in lesson.segments:
            if kind == "html":
                for link in _internal_links(seg):
                    if not _link_ok(cat, link, lab_ids):
                        problems.append(
                            Problem(
                                lesson.path,
                                line_of_text(lesson.source, link),
                                f"broken internal link {link}",
                            )
                        )
        ids = [q.id for q in lf.quiz]
        for dup in {i for i in ids if ids.count(i) > 1}:
            problems.append(Problem(lesson.path, 2, f"quiz id '{dup}' is used twice"))
    return problems


def related_map(cat: Catalogue) -> dict[str, set[str]]:
    """Undirected relation map: a term and every term that names it or it names."""
    out: dict[str, set[str]] = {s: set(t.front.related) for s, t in cat.terms.items()}
    for s, t in cat.terms.items():
        for r in t.front.related:
            out.setdefault(r, set()).add(s)
    return out
