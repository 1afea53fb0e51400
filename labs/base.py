"""What a lab is: validated parameters, metadata, ``run(params, ctx)`` (computes,
emitting progress where the work happens) and ``present(output, params, ctx)`` (turns
what ``run`` returned into the page's events: tables, metrics, figures, log lines;
it computes nothing and emits no progress). ``Lab.execute`` calls one then the other.

Lab modules import no torch at module level, so the web process can validate
parameters and list labs without paying for (or risking) a torch import.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from labs.events import DONE, Figure, Log, Metric, Progress, Table
from labs.viz.tiles import MAX_TILES, Tile, from_outputs


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


# What a value must be, by pydantic's error type: "must " + the phrase. ``{x}`` names a
# key of the error's context.
_MUST = {
    "literal_error": "be one of {expected}",
    "enum": "be one of {expected}",
    "int_parsing": "be a whole number",
    "int_type": "be a whole number",
    "int_from_float": "be a whole number",
    "float_parsing": "be a number",
    "float_type": "be a number",
    "finite_number": "be a finite number",
    "bool_parsing": "be true or false",
    "bool_type": "be true or false",
    "string_type": "be text",
    "list_type": "be a list",
    "dict_type": "be an object of name: value",
    "greater_than_equal": "be at least {ge}",
    "greater_than": "be more than {gt}",
    "less_than_equal": "be at most {le}",
    "less_than": "be less than {lt}",
    "multiple_of": "be a multiple of {multiple_of}",
    "too_long": "have at most {max_length} items",
    "too_short": "have at least {min_length} items",
    "string_too_long": "have at most {max_length} characters",
    "string_too_short": "have at least {min_length} characters",
}
_SHOWN_INPUT = 40  # characters of a refused value quoted back
_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?")  # a form's number, shown unquoted


def _got(err: Any) -> str:
    ctx = err.get("ctx") or {}
    if "actual_length" in ctx:
        return f" (got {ctx['actual_length']})"
    value = err.get("input")
    if isinstance(value, dict | list):
        return ""
    shown = value if isinstance(value, str) and _NUMBER.fullmatch(value) else repr(value)
    return f" (got {shown[:_SHOWN_INPUT]}{'…' if len(shown) > _SHOWN_INPUT else ''})"


def _sentence(text: str) -> str:
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


def _is_union_branch(part: Any) -> bool:
    """pydantic names the member of a union a value failed as a location step, e.g.
    ``literal['default','tensor','channel']`` or ``int``: not a place in the input."""
    return isinstance(part, str) and ("[" in part or part in {"int", "float", "str", "bool"})


def _field_messages(where: str, errors: list[Any], fields: Sequence[str]) -> str:
    """One sentence for the errors of one place (a parameter, or an item of it): the
    branches of a union merge into one "must be A, or B" sentence."""
    if errors[0]["type"] == "extra_forbidden":
        return _sentence(f"This lab has no parameter of that name; it takes {', '.join(fields)}")
    if errors[0]["type"] == "missing":
        return "Required."
    phrases = [
        _MUST[e["type"]].format(**(e.get("ctx") or {})) for e in errors if e["type"] in _MUST
    ]
    others = [e["msg"].removeprefix("Value error, ") for e in errors if e["type"] not in _MUST]
    subject = where or "it"
    if phrases and not others:
        return _sentence(f"{subject} must {', or '.join(dict.fromkeys(phrases))}{_got(errors[0])}")
    text = "; ".join(dict.fromkeys(others))  # a lab's own message, already a sentence
    return f"{where[:1].upper()}{where[1:]}: {text}" if where else text


def params_errors(e: ValidationError, fields: Sequence[str] = ()) -> dict[str, str]:
    """pydantic's errors as ``{parameter: message}``, each message a sentence a learner
    can act on ("It must have at most 2 items (got 3)."); a nested place reads "Item
    2 must be …" (1-based list positions); model-level errors go under ``""``. ``fields``: the
    parameter names, for the message about an unknown one."""
    grouped: dict[tuple[str, str], list[Any]] = {}
    for err in e.errors():
        loc = [p for p in err["loc"] if p != "body" and not _is_union_branch(p)]
        key = str(loc[0]) if loc else WHOLE_REQUEST
        where = " ".join(f"item {int(p) + 1}" if isinstance(p, int) else str(p) for p in loc[1:])
        grouped.setdefault((key, where), []).append(err)
    out: dict[str, list[str]] = {}
    for (key, where), errors in grouped.items():
        out.setdefault(key, []).append(_field_messages(where, errors, fields))
    return {k: " ".join(v) for k, v in out.items()}


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
    def plot(
        self, title: str, svg: str, data: dict[str, Any] | None = None, *, id: str = ""
    ) -> None: ...


@dataclass(frozen=True)
class ChoiceOutput:
    """A result a learner predicts by choosing, not by a number: which weight kind is
    most sensitive, which method wins. ``key`` holds the winner in the result;
    ``ties_key`` (optional) the options a paired comparison cannot tell from it (inside
    the noise), each of which also counts as a right prediction."""

    key: str
    label: str
    options: tuple[str, ...]
    ties_key: str = ""


@dataclass(frozen=True)
class Concept:
    """A review question about the idea a wrong prediction missed ("which is larger,
    and why"), computed from the run's stored result: ``answer`` indexes ``choices``."""

    prompt: str
    choices: tuple[str, ...]
    answer: int
    explanation: str


# A numeric output ``key`` may come with ``key + INTERVAL_SUFFIX`` in the result: its
# 95 % interval ``[low, high]``. A prediction inside it is as right as the run can tell.
INTERVAL_SUFFIX = "_interval"


class Computed(Protocol):
    """What a ``run`` may return instead of its result: the result (stored) and what
    only ``present`` shows beside it (a log of what was tried, arrays for a figure)."""

    @property
    def result(self) -> LabResult: ...


@dataclass(frozen=True)
class Lab:
    id: str
    title: str
    summary: str
    needs_gpu: NeedsGPU
    params: type[LabParams]
    # Computes the result (or a ``Computed`` holding it), emitting honest progress.
    run: Callable[[Any, Context], LabResult | Computed]
    time_limit_s: float = 60.0
    memory_limit_mb: int = 2048
    # Large torch ops (a model's forward passes): the child gets every core of its run
    # as torch threads, not half (labs.runtime.limits.lab_threads).
    wide_ops: bool = False
    numeric_outputs: tuple[tuple[str, str], ...] = ()  # (result key, unit) a learner can predict
    # The run page's headline tiles from the stored result (labs.viz.tiles); None: the
    # numeric outputs.
    headline: Callable[[Mapping[str, Any]], list[Tile]] | None = None
    choice_outputs: tuple[ChoiceOutput, ...] = ()  # what a learner can predict by choosing
    # The review question a wrong prediction of ``metric`` becomes, from the stored
    # result; None: the lab has none.
    concept: Callable[[Mapping[str, Any], str], Concept | None] | None = None
    # What ``run`` returned -> the page's events; None: ``run`` emits its own.
    present: Callable[[Any, Any, Context], None] | None = None

    def execute(self, params: LabParams, ctx: Context) -> LabResult:
        """``run`` then ``present`` (the one order the worker, the CLI and the tests
        use); with a ``present`` the events end with ``progress(1.0, "done")``, sent
        once they are all out. Returns the result to store."""
        out = self.run(params, ctx)
        if self.present is not None:
            self.present(out, params, ctx)
            ctx.progress(DONE.fraction, DONE.message)
        return out if isinstance(out, LabResult) else out.result

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
            raise InvalidParams(params_errors(e, list(self.params.model_fields))) from None
        bad = {name: why for name, v in stored.items() if (why := _unstorable(v))}
        if bad:
            raise InvalidParams(bad)
        return params


class _EventSink(Protocol):
    def __call__(self, kind: str, data: dict[str, Any]) -> None: ...


class EventContext:
    """A Context that turns each call into a typed event (``labs.events``) passed to
    ``sink`` as ``(kind, data)``."""

    def __init__(self, sink: _EventSink, device: str = "cpu", tmpdir: str = "/tmp"):  # noqa: S108
        self._sink = sink
        self.device = device
        self.tmpdir = tmpdir

    def emit(self, event: Log | Progress | Table | Metric | Figure) -> None:
        self._sink(event.kind, event.data())

    def log(self, text: str) -> None:
        self.emit(Log(str(text)))

    def progress(self, fraction: float, message: str = "") -> None:
        self.emit(Progress(fraction, message))

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None:
        self.emit(Table(title, list(columns), rows))

    def metric(self, name: str, value: float, unit: str = "", label: str | None = None) -> None:
        self.emit(Metric(name, value, unit, label))

    def plot(
        self, title: str, svg: str, data: dict[str, Any] | None = None, *, id: str = ""
    ) -> None:
        self.emit(Figure.of(id, title, svg, data))
