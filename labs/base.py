"""What a lab is: validated parameters, metadata and a ``run(params, ctx)``.

Lab modules import no torch at module level, so the web process can validate
parameters and list labs without paying for (or risking) a torch import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from labs.headline import MAX_TILES, Tile, from_outputs


class NeedsGPU(StrEnum):
    required = "required"
    preferred = "preferred"
    no = "no"


class LabParams(BaseModel):
    """Base for every lab's parameters: unknown keys are rejected, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# The key of errors that belong to no single parameter (the request as a whole).
WHOLE_REQUEST = ""
NOT_AN_OBJECT = "Parameters must be a JSON object of name: value."


class InvalidParams(ValueError):
    """Parameters a lab refuses. ``errors`` maps each parameter name (``WHOLE_REQUEST``
    for the request as a whole) to its messages joined by ``"; "``: the one error
    format the web (422 per field), the CLI and the worker show."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k or 'params'}: {v}" for k, v in errors.items()))
        self.errors = errors


def params_errors(e: ValidationError) -> dict[str, str]:
    """pydantic's errors as ``{parameter: message}``; a nested location reads
    ``item 2.x: …`` (1-based list positions), model-level errors go under ``""``."""
    out: dict[str, list[str]] = {}
    for err in e.errors():
        loc = [p for p in err["loc"] if p not in ("body",)]
        key = str(loc[0]) if loc else WHOLE_REQUEST
        msg = err["msg"].removeprefix("Value error, ")
        if len(loc) > 1:
            where = ".".join(str(int(p) + 1) if isinstance(p, int) else str(p) for p in loc[1:])
            msg = f"item {where}: {msg}"
        out.setdefault(key, []).append(msg)
    return {k: "; ".join(v) for k, v in out.items()}


def _unstorable(value: Any) -> str | None:
    """Why ``value`` (validated params as JSON) cannot be stored as a run's JSON on
    every database, or None: NUL characters (PostgreSQL rejects them in text and
    JSONB) and non-finite numbers (not JSON)."""
    if isinstance(value, str):
        return "must not contain NUL characters" if "\x00" in value else None
    if isinstance(value, float):
        return None if math.isfinite(value) else "must be a finite number"
    if isinstance(value, dict):
        items: Any = [*value.keys(), *value.values()]
    elif isinstance(value, list):
        items = value
    else:
        return None
    return next((why for why in map(_unstorable, items) if why), None)


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
    # The run page's headline tiles from the stored result (labs.headline); None: the
    # numeric outputs.
    headline: Callable[[Mapping[str, Any]], list[Tile]] | None = None

    @property
    def queue(self) -> str:
        return "gpu" if self.needs_gpu is NeedsGPU.required else "cpu"

    def tiles(self, result: Mapping[str, Any] | None) -> list[Tile]:
        """The headline tiles of a stored result. A result stored before its lab's
        headline changed may lack a key: it then falls back to the numeric outputs."""
        if not result:
            return []
        if self.headline is not None:
            try:
                return self.headline(result)[:MAX_TILES]
            except (KeyError, IndexError, TypeError, ValueError):
                pass
        return from_outputs(result, self.numeric_outputs)

    def params_schema(self) -> dict[str, Any]:
        return self.params.model_json_schema()

    def validate(self, data: Any) -> LabParams:
        """The lab's parameters from ``data`` (a JSON object, form text or a stored
        run's params); raises ``InvalidParams``. The one validator of the web, the
        CLI and the worker.

        The JSON form of the result (what a run stores) must validate again: a
        cross-field check on a default that pydantic skips (no ``validate_default``)
        runs once the value is explicit, and what it rejects must fail here with its
        message rather than later as a failed run. That JSON must also be storable
        on every database (no NUL, no NaN)."""
        if not isinstance(data, dict):
            raise InvalidParams({WHOLE_REQUEST: NOT_AN_OBJECT})
        try:
            params = self.params.model_validate(data)
            stored = params.model_dump(mode="json")
            self.params.model_validate(stored)
        except ValidationError as e:
            raise InvalidParams(params_errors(e)) from None
        bad = {name: why for name, v in stored.items() if (why := _unstorable(v))}
        if bad:
            raise InvalidParams(bad)
        return params


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
