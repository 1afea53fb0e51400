"""Full-text search over terms and lessons with the database's own engine:
SQLite FTS5 (bm25, snippet) or PostgreSQL (tsvector, ts_rank, ts_headline)."""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass

import yaml
from sqlalchemy import case, delete, func, select, text
from sqlalchemy.orm import Session

from app.content import Catalogue
from app.content.markdown import make_markdown
from app.db import Meta, SearchDoc

MAX_QUERY = 200
_WORD = re.compile(r"\w+", re.UNICODE)
# Highlight markers that cannot occur in content; replaced by <mark> after escaping.
_HL_OPEN, _HL_CLOSE = "\x02", "\x03"


_MD = make_markdown()
# LaTeX commands that content uses, as the characters a reader sees in a snippet.
_TEX = {
    "times": "×",
    "cdot": "·",
    "approx": "≈",
    "le": "≤",
    "leq": "≤",
    "ge": "≥",
    "geq": "≥",
    "ne": "≠",
    "neq": "≠",
    "pm": "±",
    "to": "→",
    "infty": "∞",
    "sum": "Σ",
    "log": "log",
    "Delta": "Δ",
    "delta": "δ",
    "sigma": "σ",
    "mu": "μ",
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "epsilon": "ε",
    "lambda": "λ",
    "theta": "θ",
    "pi": "π",
    "ldots": "…",
    "dots": "…",
    "lfloor": "⌊",
    "rfloor": "⌋",
    "lceil": "⌈",
    "rceil": "⌉",
    "quad": " ",
}
_TEX_COMMAND = re.compile(r"\\([A-Za-z]+)")
_TEX_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")


def _tex_text(tex: str) -> str:
    """A formula as plain text: ``\\frac{a}{b}`` → ``a/b``, ``\\times`` → ``×``, no braces."""
    tex = _TEX_FRAC.sub(r"(\1)/(\2)", tex)
    tex = _TEX_COMMAND.sub(lambda m: _TEX.get(m.group(1), m.group(1)), tex)
    return re.sub(r"\\[,;! ]", " ", tex).replace("{", "").replace("}", "")


# Fenced blocks that content uses as directives, not as code a reader sees: a lab embed
# shows its prompt, a figure its caption (docs/content-format.md).
_DIRECTIVES = {"lab": "prompt", "figure": "caption"}


def _directive_text(block: str) -> str:
    """The words a reader sees of a ``lab`` or ``figure`` block: its prompt or caption."""
    try:
        spec = yaml.safe_load(block)
    except yaml.YAMLError:
        return ""
    if not isinstance(spec, dict):
        return ""
    return " ".join(plain_text(str(spec[k])) for k in set(_DIRECTIVES.values()) if spec.get(k))


def plain_text(markdown: str) -> str:
    """What a reader sees of ``markdown``, as text for the index and its snippets: link
    text without its URL, code without backticks, formulas without ``$``, no emphasis marks."""
    parts: list[str] = []
    for token in _MD.parse(markdown):
        if token.type == "inline":
            for child in token.children or []:
                if child.type in ("text", "code_inline"):
                    parts.append(child.content)
                elif child.type == "math_inline":
                    parts.append(_tex_text(child.content))
                elif child.type in ("softbreak", "hardbreak"):
                    parts.append(" ")
                elif child.type == "image":
                    parts.append(child.content)
        elif token.type == "fence" and token.info.strip() in _DIRECTIVES:
            parts.append(_directive_text(token.content))
        elif token.type in ("fence", "code_block"):
            parts.append(token.content)
        elif token.type.startswith("math_block"):
            parts.append(_tex_text(token.content))
        if token.type.endswith("_close") and token.block or token.type in ("fence", "code_block"):
            parts.append("\n")
    return re.sub(r"[ \t]+", " ", "".join(parts)).strip()


@dataclass
class Hit:
    kind: str
    slug: str
    title: str
    snippet_html: str

    @property
    def url(self) -> str:
        return f"/{'terms' if self.kind == 'term' else 'lessons'}/{self.slug}"


def _docs(cat: Catalogue) -> list[dict[str, str]]:
    docs = []
    for t in cat.terms.values():
        docs.append(
            {
                "kind": "term",
                "slug": t.slug,
                "title": t.title,
                "aliases": " ; ".join(t.front.aliases),
                "definition": plain_text(t.front.definition),
                "body": "\n\n".join(plain_text(md) for md in t.depths_md),
            }
        )
    for lesson in cat.lessons.values():
        docs.append(
            {
                "kind": "lesson",
                "slug": lesson.slug,
                "title": lesson.title,
                "aliases": "",
                "definition": plain_text(lesson.front.summary),
                "body": plain_text(lesson.body_md),
            }
        )
    return docs


def sync_index(session: Session, cat: Catalogue) -> bool:
    """Mirror the catalogue into search_docs when it changed; True if rewritten."""
    docs = _docs(cat)
    digest = hashlib.sha256(
        repr(sorted((d["kind"], d["slug"], hash(tuple(d.values()))) for d in docs)).encode()
    ).hexdigest()
    row = session.get(Meta, "search_digest")
    if row is not None and row.value == digest:
        return False
    session.execute(delete(SearchDoc))
    session.add_all(SearchDoc(**d) for d in docs)
    if row is None:
        session.add(Meta(key="search_digest", value=digest))
    else:
        row.value = digest
    session.commit()
    return True


# Words that carry no topic ("awq vs gptq"): dropped unless the query is nothing else.
STOPWORDS = frozenset(
    "a an and are do does for how in is of on or the to versus vs what when which why with".split()
)
# Hits the engine ranks before titles and aliases re-rank them (beyond the page shown).
CANDIDATES = 60


def _terms(q: str) -> list[str]:
    words = _WORD.findall(q[:MAX_QUERY].lower())[:12]
    return [w for w in words if w not in STOPWORDS] or words


def _safe_snippet(raw: str) -> str:
    return html.escape(raw).replace(_HL_OPEN, "<mark>").replace(_HL_CLOSE, "</mark>")


def _found(words: list[str], names: list[str]) -> int:
    """How many query words are words of ``names``; the last query word counts as a
    prefix, as it does in the full-text match (type-ahead)."""
    pool = {w for n in names for w in _terms(n)}
    return sum(
        1
        for i, w in enumerate(words)
        if w in pool or (i == len(words) - 1 and any(p.startswith(w) for p in pool))
    )


def _title_rank(words: list[str], title: str, aliases: str) -> tuple[int, int, int]:
    """Sort key from the title and aliases: 0 first if the query is the title or an
    alias, then more query words in the title, then more in the aliases."""
    names = [a for a in aliases.split(" ; ") if a]
    exact = any(_terms(n) == words for n in [title, *names])
    return (0 if exact else 1, -_found(words, [title]), -_found(words, names))


def search(session: Session, q: str, limit: int = 20) -> list[Hit]:
    """Ranked hits; any input (quotes, operators, junk) is reduced to plain words. A
    document matches any of the words; the engine's rank (bm25, ts_rank) orders the
    candidates, then a title or alias that is the query, or holds more of its words,
    comes first: "quantization" finds the Quantization card before every card that
    only mentions it."""
    words = _terms(q)
    if not words:
        return []
    n = limit + CANDIDATES
    if session.get_bind().dialect.name == "sqlite":
        # Every word quoted (no operators reach FTS5); the last one as a prefix for type-ahead.
        match = " OR ".join([*(f'"{w}"' for w in words[:-1]), f'"{words[-1]}"*'])
        rows = session.execute(
            text(
                "SELECT d.kind, d.slug, d.title, d.aliases, "
                "snippet(search_fts, -1, :o, :c, ' … ', 14) AS snip "
                "FROM search_fts JOIN search_docs d ON d.id = search_fts.rowid "
                "WHERE search_fts MATCH :m "
                "ORDER BY bm25(search_fts, 10.0, 10.0, 4.0, 1.0) LIMIT :n"
            ),
            {"m": match, "o": _HL_OPEN, "c": _HL_CLOSE, "n": n},
        ).all()
    else:
        tsq = " | ".join(f"{w}:*" for w in words)
        # Match and rank on the stored tsvector (migration 0003); the costly headline
        # is made only for the candidates, after the limit.
        rows = session.execute(
            text(
                "SELECT kind, slug, title, aliases, ts_headline('english', "
                "definition || ' ' || body, q, 'StartSel=' || :o || ', StopSel=' || :c || "
                "', MaxWords=28, MinWords=10') AS snip "
                "FROM (SELECT kind, slug, title, aliases, definition, body, q, "
                "ts_rank(tsv, q) AS rank "
                "FROM search_docs, to_tsquery('english', :tsq) q WHERE tsv @@ q "
                "ORDER BY rank DESC LIMIT :n) hits ORDER BY rank DESC"
            ),
            {"tsq": tsq, "o": _HL_OPEN, "c": _HL_CLOSE, "n": n},
        ).all()
    ranked = sorted(
        enumerate(rows), key=lambda ir: (*_title_rank(words, ir[1][2], ir[1][3]), ir[0])
    )
    return [
        Hit(kind=r[0], slug=r[1], title=r[2], snippet_html=_safe_snippet(r[4] or ""))
        for _, r in ranked[:limit]
    ]


def suggest(session: Session, q: str, limit: int = 8) -> list[SearchDoc]:
    """Type-ahead for the "Go to" box: titles (at the start or at a word) and aliases."""
    needle = q.strip().lower()[:80]
    if not needle:
        return []
    esc = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    title = func.lower(SearchDoc.title)
    starts = title.like(esc + "%", escape="\\")
    stmt = (
        select(SearchDoc)
        .where(
            starts
            | title.like("% " + esc + "%", escape="\\")
            | func.lower(SearchDoc.aliases).like(esc + "%", escape="\\")
            | func.lower(SearchDoc.aliases).like("% ; " + esc + "%", escape="\\")
        )
        .order_by(case((starts, 0), else_=1), SearchDoc.kind.desc(), SearchDoc.title)
        .limit(limit)
    )
    return list(session.scalars(stmt))
