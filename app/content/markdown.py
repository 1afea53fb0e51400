"""Markdown to HTML, once at load: CommonMark with tables, $math$ as MathML,
anchors on ### headings, and raw HTML disabled (content can never inject script).

A fenced block with the info string ``figure`` is handed to ``env["figure"]`` (see
``app.content.figures``), which returns the escaped ``<figure>`` HTML; without one in
``env`` it renders as an ordinary code block."""

from __future__ import annotations

import html
from collections.abc import Callable, MutableMapping
from typing import Any

from markdown_it import MarkdownIt
from mdit_py_plugins.anchors import anchors_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin


def _math(content: str, display: bool) -> str:
    from latex2mathml.converter import convert

    try:
        mathml: str = convert(content, display="block" if display else "inline")
    except Exception:  # an unparsable formula shows as code, the checker reports it
        return f"<code>{html.escape(content)}</code>"
    # A formula wider than a phone scrolls inside its own box instead of widening the
    # page: Chromium neither scrolls a <math> element itself nor breaks inline math
    # across lines. A <span> either way, since `$$…$$` inside a paragraph renders here.
    return f'<span class="math-{"block" if display else "inline"}">{mathml}</span>'


def _fence(self: Any, tokens: Any, idx: int, options: Any, env: MutableMapping[str, Any]) -> str:
    token = tokens[idx]
    figure: Callable[[str], str] | None = env.get("figure") if env else None
    if figure is not None and token.info.strip() == "figure":
        return figure(token.content)
    out: str = self.fence(tokens, idx, options, env)
    return out


def make_markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "typographer": True}).enable("table")
    md.use(dollarmath_plugin, allow_space=True, double_inline=True)
    md.use(anchors_plugin, min_level=3, max_level=3, permalink=False)
    md.add_render_rule("fence", _fence)
    md.add_render_rule(
        "math_inline", lambda self, tokens, idx, options, env: _math(tokens[idx].content, False)
    )
    md.add_render_rule(
        "math_block",
        lambda self, tokens, idx, options, env: _math(tokens[idx].content, True) + "\n",
    )
    # `$$…$$` written on a paragraph's own line without blank lines around it parses as
    # "double inline" math; without this rule it rendered as raw LaTeX in a <div>.
    md.add_render_rule(
        "math_inline_double",
        lambda self, tokens, idx, options, env: _math(tokens[idx].content, True),
    )
    md.add_render_rule(
        "math_block_label",
        lambda self, tokens, idx, options, env: _math(tokens[idx].content, True) + "\n",
    )
    return md


_MD = make_markdown()


def render_markdown(text: str, figure: Callable[[str], str] | None = None) -> str:
    """Markdown to HTML (raw HTML disabled, so content can never inject script);
    ``figure`` renders ```figure blocks (``app.content.figures.FigureCollector``)."""
    out: str = _MD.render(text, {"figure": figure} if figure else {})
    return out


def render_inline(text: str) -> str:
    """One paragraph's inline Markdown to HTML, without the ``<p>``."""
    out: str = _MD.renderInline(text)
    return out
