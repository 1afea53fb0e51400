"""What a lab is: validated parameters, metadata and a ``run(params, ctx)``.

Lab modules import no torch at module level, so the web process can validate
parameters and list labs without paying for (or risking) a torch import.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict


class NeedsGPU(StrEnum):
    required = "required"
    preferred = "preferred"
    no = "no"


class LabParams(BaseModel):
    """Base for every lab's parameters: unknown keys are rejected, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LabResult(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Context(Protocol):
    """What a running lab may do. Events are stored and streamed as they happen."""

    device: str  # "cuda" or "cpu"
    tmpdir: str

    def log(self, text: str) -> None: ...
    def progress(self, fraction: float, message: str = "") -> None: ...
    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None: ...
    def metric(self, name: str, value: float, unit: str = "", label: str | None = None) -> None: ...
    def plot(self, title: str, svg: str, data: dict[str, Any] | None = None) -> None: ...


@dataclass(frozen=True)
class Lab:
    id: str
    title: str
    summary: str
    needs_gpu: NeedsGPU
    params: type[LabParams]
    run: Callable[[Any, Context], LabResult]
    time_limit_s: float = 60.0
    memory_limit_mb: int = 2048
    numeric_outputs: tuple[tuple[str, str], ...] = ()  # (result key, unit) a learner can predict

    @property
    def queue(self) -> str:
        return "gpu" if self.needs_gpu is NeedsGPU.required else "cpu"

    def params_schema(self) -> dict[str, Any]:
        return self.params.model_json_schema()


class _EventSink(Protocol):
    def __call__(self, kind: str, data: dict[str, Any]) -> None: ...


def _clean(v: Any) -> Any:
    """JSON-safe copy: non-finite floats become strings rather than invalid JSON."""
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return v


class EventContext:
    """A Context that turns each call into a typed event passed to ``sink``."""

    def __init__(self, sink: _EventSink, device: str = "cpu", tmpdir: str = "/tmp"):  # noqa: S108
        self._sink = sink
        self.device = device
        self.tmpdir = tmpdir

    def log(self, text: str) -> None:
        self._sink("log", {"text": str(text)})

    def progress(self, fraction: float, message: str = "") -> None:
        self._sink(
            "progress", {"fraction": max(0.0, min(1.0, float(fraction))), "message": message}
        )

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None:
        self._sink("table", {"title": title, "columns": list(columns), "rows": _clean(rows)})

    def metric(self, name: str, value: float, unit: str = "", label: str | None = None) -> None:
        self._sink(
            "metric", {"name": name, "value": _clean(value), "unit": unit, "label": label or name}
        )

    def plot(self, title: str, svg: str, data: dict[str, Any] | None = None) -> None:
        self._sink("plot", {"title": title, "svg": svg, "data": _clean(data or {})})
