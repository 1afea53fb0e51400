"""Card figures: the ```figure directive, the committed SVG files and their HTML.

A card (or lesson) places a figure with a fenced block whose info string is ``figure``::

    ```figure
    name: e2m1-grid
    alt: "A number line from -6 to 6 with the 15 values E2M1 can hold ..."
    caption: "The E2M1 grid: steps of 0.5, then 1, then 2."
    ```

``name`` is a figure of ``labs.viz.cards.FIGURES``; its SVG is ``content/figures/<name>.svg``,
drawn by ``lowbit content figures`` (matplotlib, never in the web process). The page shows
``<figure><img><figcaption>`` and, as the text alternative beside ``alt``, a ``<details>``
table of the numbers the figure draws, built here from the same torch-free data.
A committed SVG carries its data's fingerprint, so ``content check`` reports a figure that
no longer shows what the library computes without drawing anything.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from app.content.base import Strict
from app.content.markdown import render_inline
from labs.viz.cards import FIGURES, FINGERPRINT_ATTR, FigureData
from labs.viz.cards.svg import read_root_attr

FIGURE_NAME = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
_VIEWBOX_RE = re.compile(r'<svg\b[^>]*\sviewBox="0 0 ([\d.]+) ([\d.]+)"')
PT_TO_PX = 96 / 72  # matplotlib's SVG is in points


class FigureRef(Strict):
    """One ```figure block: which figure, its alt text and its caption (Markdown)."""

    name: str = Field(pattern=FIGURE_NAME)
    alt: str = Field(min_length=20, max_length=400)
    caption: str = Field(min_length=10)


@dataclass(frozen=True)
class FigureFile:
    """A committed figure: its path, a content digest (for a cache-busting URL), its data
    fingerprint as drawn, and its size in CSS pixels."""

    name: str
    path: Path
    digest: str
    fingerprint: str | None
    width: int
    height: int

    @property
    def url(self) -> str:
        return f"/figures/{self.name}.{self.digest}.svg"


def load_figure_files(content_dir: Path) -> dict[str, FigureFile]:
    """Every ``content/figures/*.svg`` by name (no directory: none)."""
    out: dict[str, FigureFile] = {}
    for path in sorted((content_dir / "figures").glob("*.svg")):
        raw = path.read_bytes()
        text = raw.decode("utf-8", errors="replace")
        box = _VIEWBOX_RE.search(text)
        w, h = (float(box.group(1)), float(box.group(2))) if box else (640.0, 360.0)
        out[path.stem] = FigureFile(
            name=path.stem,
            path=path,
            digest=hashlib.sha256(raw).hexdigest()[:10],
            fingerprint=read_root_attr(text, FINGERPRINT_ATTR),
            width=round(w * PT_TO_PX),
            height=round(h * PT_TO_PX),
        )
    return out


def figure_problem(ref: FigureRef, files: dict[str, FigureFile]) -> str | None:
    """Why a reference cannot be shown as drawn from today's library, or None."""
    if ref.name not in FIGURES:
        return f"figure '{ref.name}' is not one of labs.viz.cards.FIGURES ({', '.join(FIGURES)})"
    f = files.get(ref.name)
    if f is None:
        return f"figure '{ref.name}' has no file content/figures/{ref.name}.svg (run `lowbit content figures`)"
    if f.fingerprint != FIGURES[ref.name]().fingerprint:
        return (
            f"figure '{ref.name}' is out of date: the library's numbers changed since it was "
            "drawn (run `lowbit content figures`)"
        )
    return None


def table_html(data: FigureData) -> str:
    """The figure's numbers as an HTML table (its text alternative)."""
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in data.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
        for row in data.rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure_html(ref: FigureRef, file: FigureFile | None, data: FigureData | None) -> str:
    """``<figure>`` with the image, its caption and the data table (escaped throughout)."""
    caption = render_inline(ref.caption)
    img = (
        f'<img src="{file.url}" alt="{html.escape(ref.alt)}" width="{file.width}" '
        f'height="{file.height}" loading="lazy" decoding="async">'
        if file
        else f'<p class="muted">{html.escape(ref.alt)}</p>'
    )
    details = (
        f'<details class="figure-data"><summary>The numbers in this figure</summary>'
        f"{table_html(data)}</details>"
        if data
        else ""
    )
    return (
        f'<figure class="card-figure" id="figure-{ref.name}">{img}'
        f"<figcaption>{caption}</figcaption>{details}</figure>\n"
    )


@dataclass
class FigureCollector:
    """Renders ```figure blocks for one file while it loads, keeping what it saw: the
    references (for the cross-file check) and the YAML or schema errors (with a line)."""

    files: dict[str, FigureFile]
    data_cache: dict[str, FigureData]
    source: str = ""
    refs: list[tuple[int, FigureRef]] = field(default_factory=list)  # (line, reference)
    errors: list[tuple[int, str]] = field(default_factory=list)

    def _data(self, name: str) -> FigureData | None:
        if name not in FIGURES:
            return None
        if name not in self.data_cache:
            self.data_cache[name] = FIGURES[name]()
        return self.data_cache[name]

    def _line(self, text: str) -> int:
        first = text.strip().splitlines()[0] if text.strip() else "```figure"
        pos = self.source.find(first)
        return self.source.count("\n", 0, pos) + 1 if pos >= 0 else 1

    def __call__(self, text: str) -> str:
        try:
            ref = FigureRef.model_validate(yaml.safe_load(text) or {})
        except (yaml.YAMLError, ValidationError) as e:
            msg = "; ".join(
                f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()
            ) if isinstance(e, ValidationError) else str(e)  # fmt: skip
            self.errors.append((self._line(text), f"bad ```figure block: {msg}"))
            return ""
        self.refs.append((self._line(text), ref))
        return figure_html(ref, self.files.get(ref.name), self._data(ref.name))
