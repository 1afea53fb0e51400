"""The typed events a lab's run streams and stores, one class per kind.

A lab emits them through its ``Context`` (``ctx.log``, ``ctx.progress``, ``ctx.table``,
``ctx.metric``, ``ctx.plot``); each call builds one of these and hands its ``kind``
and ``data()`` to the sink (the worker's event pipe, a test's list). ``data()`` is
the JSON stored in ``run_events.data`` and sent on the stream.

``SCHEMA_VERSION`` is stored with each run (``runs.events_version``): version 1 (a
NULL column, runs stored before it) had figures without ``id``, so the compare page
pairs those by their titles; from version 2 every lab figure carries a stable ``id``
and the same figure of two runs pairs by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

SCHEMA_VERSION = 2


def clean(v: Any) -> Any:
    """JSON-safe copy: non-finite floats become strings rather than invalid JSON."""
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [clean(x) for x in v]
    return v


@dataclass(frozen=True)
class Log:
    kind: ClassVar[str] = "log"
    text: str

    def data(self) -> dict[str, Any]:
        return {"text": str(self.text)}


@dataclass(frozen=True)
class Progress:
    """How far the work is, emitted by ``run()`` where the work happens."""

    kind: ClassVar[str] = "progress"
    fraction: float
    message: str = ""

    def data(self) -> dict[str, Any]:
        return {"fraction": max(0.0, min(1.0, float(self.fraction))), "message": self.message}


DONE = Progress(1.0, "done")


@dataclass(frozen=True)
class Table:
    kind: ClassVar[str] = "table"
    title: str
    columns: list[str]
    rows: list[list[Any]]

    def data(self) -> dict[str, Any]:
        return {"title": self.title, "columns": list(self.columns), "rows": clean(self.rows)}


@dataclass(frozen=True)
class Metric:
    kind: ClassVar[str] = "metric"
    name: str
    value: float
    unit: str = ""
    label: str | None = None

    def data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": clean(self.value),
            "unit": self.unit,
            "label": self.label or self.name,
        }


@dataclass(frozen=True)
class Figure:
    """An SVG figure. ``id`` names the figure within its lab and stays the same from
    run to run (the compare page pairs two runs' figures by it); ``caption`` is the
    sentence under it, ``table`` its data as ``{"columns", "rows"}`` (the page's table
    alternative), ``lead`` marks the figure the run page leads with; ``extra`` holds
    what a page redraws it from (a histogram's edges and counts, bars' values)."""

    kind: ClassVar[str] = "plot"
    id: str
    title: str
    svg: str
    caption: str = ""
    table: dict[str, Any] | None = None
    lead: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, figure_id: str, title: str, svg: str, data: dict[str, Any] | None) -> Figure:
        """A figure from ``Context.plot``'s arguments: ``data`` holds the caption, the
        table and the lead mark beside the rest."""
        rest = dict(data or {})
        return cls(
            id=figure_id,
            title=title,
            svg=svg,
            caption=str(rest.pop("caption", "") or ""),
            table=rest.pop("table", None),
            lead=bool(rest.pop("lead", False)),
            extra=rest,
        )

    def data(self) -> dict[str, Any]:
        inner: dict[str, Any] = dict(self.extra)
        if self.lead:
            inner["lead"] = True
        if self.caption:
            inner["caption"] = self.caption
        if self.table is not None:
            inner["table"] = self.table
        out: dict[str, Any] = {"title": self.title, "svg": self.svg, "data": clean(inner)}
        if self.id:
            out["id"] = self.id
        return out


Event = Log | Progress | Table | Metric | Figure
KINDS: tuple[str, ...] = tuple(c.kind for c in (Log, Progress, Table, Metric, Figure))
