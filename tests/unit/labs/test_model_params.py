"""The model/GPU parameters the four budget labs share (``labs.catalog.params.ModelOnGpuParams``):
their cross-field checks run on defaults too, and each error stays on its own field,
both from ``Params.model_validate`` and from ``Lab.validate`` (the web's, the CLI's
and the worker's one validator).

With the registry as it is, every model accepts every lab's default tensor-parallel
degree and context, so most tests swap in a registry entry with fewer heads or a
shorter context: a request that then names only that model must fail on the defaulted
field it breaks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from app.runs import forms
from labs import fp8_savings, kv_capacity, memory_budget, qlora_budget
from labs.base import LabParams, params_errors
from labs.catalog import memory, models, params
from labs.registry import all_labs
from tests.unit.labs.helpers import validate

SMALL = "mistral-7b"  # the registry entry the tests shrink
MODULES = (memory_budget, qlora_budget, kv_capacity, fp8_savings)


def shrink(monkeypatch: pytest.MonkeyPatch, **changes: Any) -> None:
    monkeypatch.setitem(models.MODELS, SMALL, dataclasses.replace(models.MODELS[SMALL], **changes))


def message(check: Any, *args: Any) -> str:
    """What ``check(*args)`` raises, as the form shows it."""
    with pytest.raises(ValueError) as e:
        check(*args)
    return str(e.value)


def first_pass_errors(params: type[LabParams], data: dict[str, Any]) -> dict[str, str]:
    """Errors of a single ``model_validate``, in ``Lab.validate``'s format."""
    with pytest.raises(ValidationError) as e:
        params.model_validate(data)
    return params_errors(e.value)


def web_errors(lab_id: str, data: dict[str, Any]) -> dict[str, str]:
    params, errors = validate(all_labs()[lab_id], data)
    assert params is None
    return errors


@pytest.mark.parametrize("module", MODULES)
def test_the_four_labs_share_the_base_and_put_model_and_gpu_first(module) -> None:
    assert issubclass(module.Params, params.ModelOnGpuParams)
    assert list(module.Params.model_fields)[:2] == ["model", "gpu"]
    names = [f.name for f in forms.form_fields(module.LAB)]
    assert names[:2] == ["model", "gpu"]


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("model_id", sorted(models.MODELS))
def test_every_registry_model_accepts_every_labs_defaults(module, model_id) -> None:
    assert module.Params.model_validate({"model": model_id}).model == model_id
    params, errors = validate(module.LAB, {"model": model_id})
    assert errors == {} and params is not None


def test_memory_budget_checks_its_default_context_against_the_model(monkeypatch) -> None:
    shrink(monkeypatch, max_context=4096)  # the default context_tokens is 8192
    expected = {"context_tokens": message(memory.check_context, SMALL, 8192)}
    assert expected["context_tokens"].startswith("8192 tokens exceeds the 4096-token context")
    assert first_pass_errors(memory_budget.Params, {"model": SMALL}) == expected
    assert web_errors("memory-budget", {"model": SMALL}) == expected


def test_memory_budget_checks_its_default_tensor_parallel_against_the_model(monkeypatch) -> None:
    shrink(monkeypatch, num_kv_heads=3)  # TP 2 neither divides 3 nor is a multiple of it
    data = {"model": SMALL, "tensor_parallel": 2}
    expected = {"tensor_parallel": message(memory.check_tensor_parallel, SMALL, 2)}
    assert first_pass_errors(memory_budget.Params, data) == expected
    assert web_errors("memory-budget", data) == expected


def test_fp8_savings_checks_its_default_tp_and_context_against_the_model(monkeypatch) -> None:
    # Defaults: tensor_parallel 2 and context_tokens 4096; 25 heads do not split in two.
    shrink(monkeypatch, num_attention_heads=25, max_context=2048)
    expected = {
        "tensor_parallel": message(memory.check_tensor_parallel, SMALL, 2),
        "context_tokens": message(memory.check_context, SMALL, 4096),
    }
    assert expected["tensor_parallel"].startswith("2 does not divide the 25 attention heads")
    assert first_pass_errors(fp8_savings.Params, {"model": SMALL}) == expected
    assert web_errors("fp8-savings", {"model": SMALL}) == expected


def test_qlora_budget_checks_its_default_seq_len_against_the_model(monkeypatch) -> None:
    shrink(monkeypatch, max_context=1024)  # the default seq_len is 2048
    expected = {"seq_len": message(memory.check_context, SMALL, 2048)}
    assert first_pass_errors(qlora_budget.Params, {"model": SMALL}) == expected
    assert web_errors("qlora-budget", {"model": SMALL}) == expected


def test_kv_capacity_checks_its_default_request_length_against_the_model(monkeypatch) -> None:
    shrink(monkeypatch, max_context=1024)  # defaults: 1000 prompt + 500 output tokens
    expected = {"output_tokens": message(memory.check_context, SMALL, 1500)}
    assert first_pass_errors(kv_capacity.Params, {"model": SMALL}) == expected
    assert web_errors("kv-capacity", {"model": SMALL}) == expected


def test_kv_capacity_checks_its_default_tensor_parallel_against_the_model(monkeypatch) -> None:
    shrink(monkeypatch, num_kv_heads=3)
    data = {"model": SMALL, "tensor_parallel": 2}
    expected = {"tensor_parallel": message(memory.check_tensor_parallel, SMALL, 2)}
    assert first_pass_errors(kv_capacity.Params, data) == expected
    assert web_errors("kv-capacity", data) == expected


def test_kv_capacity_checks_defaults_against_a_changed_prompt() -> None:
    # The real registry: Llama 3.1 8B holds 131072 tokens; the default output is 500.
    long_prompt = {"prompt_tokens": 131_000}
    expected = {"output_tokens": message(memory.check_context, "llama-3.1-8b", 131_500)}
    assert first_pass_errors(kv_capacity.Params, long_prompt) == expected
    assert web_errors("kv-capacity", long_prompt) == expected
    # The default shared prefix (500 tokens) is longer than a 100-token prompt.
    short_prompt = {"prompt_tokens": 100}
    expected = {
        "shared_prefix_tokens": "the shared prefix (500 tokens) is longer than the prompt (100)"
    }
    assert first_pass_errors(kv_capacity.Params, short_prompt) == expected
    assert web_errors("kv-capacity", short_prompt) == expected


@pytest.mark.parametrize("module", MODULES)
def test_an_unknown_model_is_the_only_error(module) -> None:
    # The checks that need the model skip when the model itself was rejected.
    errors = first_pass_errors(module.Params, {"model": "gpt-5"})
    assert list(errors) == ["model"]
    assert web_errors(module.LAB.id, {"model": "gpt-5"}) == errors


def test_checks_report_with_other_field_errors(monkeypatch) -> None:
    shrink(monkeypatch, max_context=4096)
    errors = web_errors("memory-budget", {"model": SMALL, "batch": 0})
    assert set(errors) == {"context_tokens", "batch"}
