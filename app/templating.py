"""Jinja2 templates with fragments: htmx requests get only the named block."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, cast

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Template
from jinja2_fragments.fastapi import Jinja2Blocks
from markupsafe import Markup

from app.content.markdown import render_inline
from app.settings import ROOT
from app.termmap import NARROW_WIDTH, layout

templates = Jinja2Blocks(directory=str(ROOT / "templates"))
# The terminology map is drawn twice (wide and narrow); the template picks the geometry.
templates.env.globals.update(map_layout=layout, map_narrow_width=NARROW_WIDTH)
# Content strings written in inline Markdown (quiz prompts and explanations, lesson
# prompts) render as HTML, never as literal *stars* and `backticks`.
templates.env.filters["inline_md"] = lambda text: Markup(render_inline(str(text or "")))  # noqa: S704


class StaticManifest:
    """Content-hashed URLs for files under static/ (``/static/css/app.3f2a9c1d.css``)."""

    def __init__(self, static_dir: Path):
        self.static_dir = static_dir
        self.by_name: dict[str, str] = {}
        self.by_hashed: dict[str, Path] = {}
        for path in sorted(static_dir.rglob("*")):
            if not path.is_file():
                continue
            rel = path.relative_to(static_dir).as_posix()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()[:10]
            stem, dot, ext = rel.rpartition(".")
            hashed = f"{stem}.{digest}.{ext}" if dot else f"{rel}.{digest}"
            self.by_name[rel] = hashed
            self.by_hashed[hashed] = path

    def url(self, name: str) -> str:
        return "/static/" + self.by_name.get(name, name)


def is_htmx(request: Request) -> bool:
    return (
        request.headers.get("HX-Request") == "true"
        and request.headers.get("HX-History-Restore-Request") != "true"
    )


def render(
    request: Request,
    template: str,
    context: dict[str, Any] | None = None,
    block_name: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    """The full page, or only ``block_name`` when htmx asked for it. Always ``Vary: HX-Request``."""
    ctx = dict(context or {})
    ctx.setdefault("csrf_token", request.state.csrf_token)
    ctx.setdefault("username", getattr(request.state, "username", None))
    block = block_name if (block_name and is_htmx(request)) else None
    resp = templates.TemplateResponse(
        request, template, ctx, block_name=block, status_code=status_code
    )
    resp.headers["Vary"] = "HX-Request"
    resp.headers.setdefault("Cache-Control", "no-cache")
    return cast(HTMLResponse, resp)


def render_once(template: Template, context: dict[str, Any]) -> Markup:
    """A fragment rendered without a request, for parts of a page that are the same
    for everyone: render it once, cache it, and let the page's template place it
    among the parts that are per request (see app/routes/terms.py)."""
    return Markup(template.render(context))  # noqa: S704 - autoescaped by Jinja when rendered
