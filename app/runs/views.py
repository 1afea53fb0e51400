"""Presentation helpers for run pages: value formatting, flattening and diffing
two runs, and the server-sent event wire format. No torch, no web framework. (The
inline charts the compare page redraws are ``labs.viz.inline``'s.)"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from labs.viz.tiles import human_label, number_text, tile

# Values shown in a table cell before "…"; long lists (codes, histograms) are cut.
MAX_LIST_SHOWN = 16
MAX_TEXT_SHOWN = 200
# Nesting kept as separate rows when flattening for a comparison.
MAX_FLATTEN_DEPTH = 4


def format_value(v: Any) -> str:
    """A compact, readable rendering of a result value."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        return number_text(v)
    if isinstance(v, list | tuple):
        # Read as a list of numbers or words, not as Python's repr with brackets.
        shown = ", ".join(format_value(x) for x in v[:MAX_LIST_SHOWN])
        more = f", … ({len(v)} values)" if len(v) > MAX_LIST_SHOWN else ""
        return clip(f"{shown}{more}") if v else "none"
    if isinstance(v, dict):
        return clip(format_params(v))
    return clip(str(v))


def quantity(value: Any, unit: str = "") -> str:
    """A number with its unit as a tile shows it: bytes with a binary prefix (a signed
    difference keeps its sign: '−4.13 MiB'), '%' beside its number, three significant
    digits."""
    if not _number(value):
        return format_value(value)
    text = tile("", abs(value), unit).text
    return f"−{text}" if value < 0 else text


def clip(text: str, limit: int = MAX_TEXT_SHOWN) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, ending in "…"."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    # Cut at the last space unless that drops most of the text (one very long word).
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;·") + "…"


def format_params(params: dict[str, Any] | None) -> str:
    """A run's parameters as a learner reads them: ``format int4 · shape 256, 256``;
    unset (``None``) values are left out, and no parameters read "defaults"."""
    shown = [
        f"{str(k).replace('_', ' ')} {format_value(v)}"
        for k, v in (params or {}).items()
        if v is not None
    ]
    return " · ".join(shown) or "defaults"


def flatten(obj: Any, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """Nested dicts (and lists of dicts) as ``a.b.0.c`` keys; lists of scalars stay whole."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict) and depth < MAX_FLATTEN_DEPTH:
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}.", depth + 1))
    elif (
        isinstance(obj, list)
        and obj
        and all(isinstance(x, dict) for x in obj)
        and depth < MAX_FLATTEN_DEPTH
        and len(obj) <= MAX_LIST_SHOWN
    ):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}.", depth + 1))
    else:
        out[prefix.rstrip(".") or "value"] = obj
    return out


@dataclass(frozen=True)
class DiffRow:
    key: str
    a: Any
    b: Any
    title: str = ""  # the words the lab's form uses for this key, where it has its own

    @property
    def same(self) -> bool:
        return self.a == self.b

    @property
    def label(self) -> str:
        return self.title or human_label(self.key)

    @property
    def delta(self) -> float | None:
        """b − a for two numbers (not booleans), else None."""
        if _number(self.a) and _number(self.b) and not self.same:
            return float(self.b) - float(self.a)
        return None

    @property
    def ratio(self) -> float | None:
        """b / a for two numbers with a ≠ 0, else None."""
        if self.delta is not None and float(self.a) != 0:
            return float(self.b) / float(self.a)
        return None


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def diff(
    a: dict[str, Any] | None, b: dict[str, Any] | None, titles: dict[str, str] | None = None
) -> list[DiffRow]:
    """Rows of both flattened dicts in a's key order, then keys only b has; ``titles``
    names keys in words of their own (a lab form's field titles)."""
    fa, fb = flatten(a or {}), flatten(b or {})
    keys = list(fa) + [k for k in fb if k not in fa]
    return [DiffRow(k, fa.get(k), fb.get(k), (titles or {}).get(k, "")) for k in keys]


@dataclass(frozen=True)
class ResultBody:
    """A finished run's output events in the order its page shows them: notices
    (what the run could not do) first, the lead figure, tables, the other figures,
    then the metrics."""

    notices: list[dict[str, Any]]
    lead: dict[str, Any] | None
    details: list[dict[str, Any]]
    figures: list[dict[str, Any]]
    metrics: list[dict[str, Any]]


def arrange_outputs(outputs: list[dict[str, Any]]) -> ResultBody:
    """The lead figure is the plot its presenter marked ``lead``, else the first plot."""
    plots = [e for e in outputs if e["kind"] == "plot"]
    lead = next((e for e in plots if (e["data"].get("data") or {}).get("lead")), None)
    lead = lead or (plots[0] if plots else None)
    return ResultBody(
        notices=[e for e in outputs if e["kind"] == "notice"],
        lead=lead,
        details=[e for e in outputs if e["kind"] == "table"],
        figures=[e for e in plots if e is not lead],
        metrics=[e for e in outputs if e["kind"] == "metric"],
    )


def sse(event: str, data: str, event_id: int | None = None) -> str:
    """One server-sent event; multi-line ``data`` becomes several ``data:`` lines."""
    lines = [f"id: {event_id}"] if event_id is not None else []
    lines.append(f"event: {event}")
    lines += [f"data: {line}" for line in (data.splitlines() or [""])]
    return "\n".join(lines) + "\n\n"


def latest_progress(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    for e in reversed(events):
        if e["kind"] == "progress":
            return dict(e["data"])
    return None
