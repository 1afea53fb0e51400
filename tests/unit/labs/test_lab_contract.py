"""The contract every registered lab keeps, checked once for the whole registry.

A new lab gets these checks by being registered: `{}` is a valid request, every
parameter is described and defaulted, a run with defaults streams strict-JSON events
and returns a result that validates against its own model, and the lab declares
whether it needs a GPU.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from labs.base import Lab, LabParams, LabResult, NeedsGPU
from labs.registry import all_labs
from tests.unit.labs.helpers import Event, run_lab

LABS = all_labs()

# The fixed lab ids (DESIGN.md) and what each declares; a lab added later needs only a
# valid NeedsGPU, but these must not drift.
DECLARED: dict[str, NeedsGPU] = {
    "gpu-status": NeedsGPU.preferred,
    "torch-env": NeedsGPU.preferred,
    "block-quantize": NeedsGPU.preferred,
    "memory-budget": NeedsGPU.no,
    "qlora-budget": NeedsGPU.no,
    "kv-capacity": NeedsGPU.no,
    "fp8-savings": NeedsGPU.no,
    "granularity-compare": NeedsGPU.no,
    "scale-derivation": NeedsGPU.no,
    "dot-product-scales": NeedsGPU.no,
    "vram-observe": NeedsGPU.preferred,
    "shard-doctor": NeedsGPU.no,
    "format-support": NeedsGPU.no,
    "reproducibility": NeedsGPU.no,
}
# Labs that report the worker's environment: a log and a table, no figure. gpu-status
# without a driver shows its finding and no table.
EVENT_KINDS = {"progress", "log", "table", "metric", "plot"}
ENVIRONMENT_LABS = {"gpu-status", "torch-env"}


@pytest.fixture(scope="module", params=sorted(LABS))
def default_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Lab, LabResult, list[Event]]:
    """Each lab run once with `{}`, as the worker runs it (on the CPU)."""
    lab = LABS[request.param]
    result, events = run_lab(lab, {}, tmpdir=tmp_path_factory.mktemp(lab.id))
    return lab, result, events


def _module(lab: Lab) -> Any:
    return sys.modules[lab.run.__module__]


def test_every_fixed_lab_is_registered() -> None:
    assert set(DECLARED) <= set(LABS)


@pytest.mark.parametrize("lab", LABS.values(), ids=lambda lab: lab.id)
def test_declaration(lab: Lab) -> None:
    assert isinstance(lab, Lab) and LABS[lab.id] is lab
    assert isinstance(lab.needs_gpu, NeedsGPU)
    if lab.id in DECLARED:
        assert lab.needs_gpu is DECLARED[lab.id]
    assert lab.queue == ("gpu" if lab.needs_gpu is NeedsGPU.required else "cpu")
    assert issubclass(lab.params, LabParams)
    module_params = getattr(_module(lab), "Params", None)
    if module_params is not None:  # a module's `Params` is the model its lab validates with
        assert lab.params is module_params
    assert lab.title and lab.summary and lab.time_limit_s > 0 and lab.memory_limit_mb > 0


@pytest.mark.parametrize("lab", LABS.values(), ids=lambda lab: lab.id)
def test_every_param_has_a_description_and_a_default(lab: Lab) -> None:
    for name, field in lab.params.model_fields.items():
        assert field.description, name
        assert not field.is_required(), name
    schema = lab.params_schema()
    assert all(p.get("description") for p in schema.get("properties", {}).values())
    lab.params.model_validate({})  # `{}` is a valid request


@pytest.mark.parametrize("lab", LABS.values(), ids=lambda lab: lab.id)
def test_unknown_keys_are_rejected(lab: Lab) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        lab.params.model_validate({"no_such_parameter": 1})


def test_a_default_run_is_strict_json_and_validates(
    default_run: tuple[Lab, LabResult, list[Event]],
) -> None:
    lab, result, events = default_run
    # run_lab already refused NaN/Inf in the events and the result; check it here too.
    json.dumps([data for _, data in events], allow_nan=False)
    dumped = result.model_dump_json()
    json.loads(dumped)
    assert isinstance(result, LabResult)
    module_result = getattr(_module(lab), "Result", None)
    if module_result is not None:  # a module's `Result` is the model its run returns
        assert type(result) is module_result
    assert type(result).model_validate_json(dumped) == result
    assert type(result).model_validate(result.model_dump(mode="json")) == result
    fields = type(result).model_fields
    for key, unit in lab.numeric_outputs:
        assert key in fields and unit, key
        value = getattr(result, key)
        assert value is None or isinstance(value, int | float), key


def test_a_default_run_streams_every_event_kind(
    default_run: tuple[Lab, LabResult, list[Event]],
) -> None:
    lab, _, events = default_run
    kinds = {kind for kind, _ in events}
    assert kinds <= EVENT_KINDS
    if lab.id in ENVIRONMENT_LABS:
        assert {"progress", "log"} <= kinds
        return
    assert EVENT_KINDS <= kinds
    assert events[-1] == ("progress", {"fraction": 1.0, "message": "done"})
    for kind, data in events:
        if kind != "plot":
            continue
        # Every figure is a library SVG with its data (the page's table alternative).
        assert data["svg"].startswith("<svg") and "<script" not in data["svg"]
        assert data["data"], data["title"]


def test_every_figure_has_a_stable_id(default_run: tuple[Lab, LabResult, list[Event]]) -> None:
    """Events schema 2 (labs.events): the compare page pairs two runs' figures by id."""
    _, _, events = default_run
    ids = [data.get("id") for kind, data in events if kind == "plot"]
    assert all(ids) and len(set(ids)) == len(ids), ids


@pytest.mark.parametrize("lab", LABS.values(), ids=lambda lab: lab.id)
def test_present_emits_no_progress(lab: Lab) -> None:
    """Progress belongs to ``run``, where the work happens; ``present`` (and the helpers
    of its module it calls) only turns the output into events (issue 21: a presenter
    replayed 'quantizing to …' after the quantizing was done)."""
    import ast
    import inspect

    if lab.present is None:
        return
    tree = ast.parse(inspect.getsource(sys.modules[lab.present.__module__]))
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    seen, todo, calls = set(), [lab.present.__name__], []
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for n in ast.walk(functions[name]):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                calls.append(n.func.attr)
            if isinstance(n, ast.Name) and n.id in functions:
                todo.append(n.id)
    assert lab.present.__name__ in seen and "progress" not in calls, sorted(seen)
