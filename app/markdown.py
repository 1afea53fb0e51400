"""Markdown documents (a run's report, the notebook export) rendered from
``templates/reports/*.md`` with Jinja2.

A separate environment from the HTML one: Markdown is served as
``text/markdown``, so nothing is HTML-escaped, and block tags on their own lines
leave no blank lines behind (``trim_blocks``, ``lstrip_blocks``).
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from app.runs.views import format_value
from app.settings import ROOT


def cell(value: Any) -> str:
    """A value as one Markdown table cell: formatted for reading, ``|`` escaped, one line.
    A list keeps its brackets here: a report's reader copies values back as JSON."""
    text = format_value(value) if not isinstance(value, list | tuple) or value else ""
    if isinstance(value, list | tuple):
        text = f"[{text}]"
    return text.replace("|", "\\|").replace("\n", " ")


def number(value: float | None) -> str:
    """A prediction or an actual value: six significant digits with thousands commas."""
    return "—" if value is None else f"{value:,.6g}"


def spec(value: Any, format_spec: str) -> str:
    """``format(value, format_spec)``: a date's strftime pattern or a number's spec."""
    return format(value, format_spec)


# Markdown, not HTML: autoescaping would put &amp; entities into a text document.
env = Environment(
    loader=FileSystemLoader(str(ROOT / "templates" / "reports")),
    autoescape=False,  # noqa: S701
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    undefined=StrictUndefined,
)
env.filters.update(cell=cell, number=number, spec=spec)


def render_markdown(name: str, **context: Any) -> str:
    """``templates/reports/<name>`` rendered with ``context``."""
    return env.get_template(name).render(**context)
