"""Run a lab in this process exactly as the worker runs it, recording its events;
validate its parameters as the web, the CLI and the worker do."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from labs.base import EventContext, InvalidParams, Lab, LabParams

Event = tuple[str, dict[str, Any]]


def as_lab(lab: Lab | ModuleType | str) -> Lab:
    """A Lab from itself, its module (``labs.block_quantize``) or its registered id."""
    if isinstance(lab, Lab):
        return lab
    if isinstance(lab, ModuleType):
        spec: Lab = lab.LAB
        return spec
    from labs.registry import get_lab

    found = get_lab(lab)
    if found is None:
        raise KeyError(f"unknown lab {lab!r}")
    return found


def run_lab(
    lab: Lab | ModuleType | str,
    params: Mapping[str, Any] | None = None,
    *,
    device: str = "cpu",
    tmpdir: str | os.PathLike[str] = "/tmp",  # noqa: S108 - EventContext's own default
) -> tuple[Any, list[Event]]:
    """Validate ``params`` with the lab's model, run it (``Lab.execute``: run, then present) on an EventContext that records
    every event, and check that the events and the result are strict JSON (as stored).
    Returns ``(result, events)``, each event ``(kind, data)``."""
    spec = as_lab(lab)
    events: list[Event] = []
    ctx = EventContext(
        lambda kind, data: events.append((kind, data)), device=device, tmpdir=str(tmpdir)
    )
    result = spec.execute(spec.params.model_validate(dict(params or {})), ctx)
    json.dumps([data for _, data in events], allow_nan=False)  # every event is strict JSON
    json.dumps(result.model_dump(mode="json"), allow_nan=False)
    return result, events


def validate(lab: Lab, data: Any) -> tuple[LabParams | None, dict[str, str]]:
    """``Lab.validate`` as a pair: ``(params, {})`` or ``(None, {field: message})``."""
    try:
        return lab.validate(data), {}
    except InvalidParams as e:
        return None, e.errors
