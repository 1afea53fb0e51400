"""app.content.predictions: a card's prediction is one its lab's form takes and its
result grades (issue 20: 19 cards predicted keys no form offered), and the numbers the
fixed cards state hold against the labs' code."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from app.content import Catalogue, ContentError, load_catalogue
from app.content.predictions import holds, prediction_problems, result_model
from app.notebook import _number
from app.settings import ROOT
from labs.base import EventContext
from labs.registry import get_lab, lab_ids
from tests.factories import make_content, write_card

# Labs a card may link whose run needs the shipped model (seconds each): their keys are
# checked against the result model only.
MODEL_LABS = {"model-quality", "tensor-sensitivity", "quant-algorithms", "kv-quant"}


@cache
def catalogue() -> Catalogue:
    return load_catalogue(ROOT / "content", lab_ids())


def _run(lab_id: str, params: dict[str, Any]) -> dict[str, Any]:
    lab = get_lab(lab_id)
    assert lab is not None
    return lab.execute(lab.validate(params), EventContext(lambda k, d: None)).model_dump(
        mode="json"
    )


def test_a_key_the_form_does_not_offer_fails() -> None:
    lab = get_lab("memory-budget")
    assert lab is not None
    params = {"model": "llama-3.1-8b", "gpu": "h100"}
    (message,) = prediction_problems(lab, params, "kv_cache_bytes_per_gpu", "bytes")
    assert "'kv_cache_bytes_per_gpu' is not a result the memory-budget lab's form" in message
    assert "total_gb_per_gpu" in message  # names what it offers
    assert list(prediction_problems(lab, params, "total_gb_per_gpu", "GB")) == []
    assert list(prediction_problems(lab, params, "total_gb_per_gpu", None)) == []


def test_a_wrong_unit_and_params_the_form_refuses_fail() -> None:
    lab = get_lab("qlora-budget")
    assert lab is not None
    (unit,) = prediction_problems(lab, {}, "trainable_params", "parameters")
    assert "'parameters'" in unit and "'params'" in unit
    bad = list(prediction_problems(lab, {"rank": -1}, "trainable_params", "params"))
    assert len(bad) == 1 and bad[0].startswith("exercise params are not what the qlora-budget")


def test_choice_outputs_count_and_the_result_model_is_walked() -> None:
    qa = get_lab("quant-algorithms")
    assert qa is not None
    assert list(prediction_problems(qa, {"methods": ["rtn", "awq"]}, "best_method", None)) == []
    model = result_model(qa)
    assert model is not None and model.__name__ == "QuantAlgorithmsResult"
    assert holds(model, "best_method") and holds(model, "methods.gptq.heldout")
    assert not holds(model, "best_methods")
    fp8 = get_lab("fp8-savings")
    assert fp8 is not None
    fp8_model = result_model(fp8)
    assert fp8_model is not None and holds(fp8_model, "speedup_same_batch")


def test_content_check_reports_the_card_with_file_and_line(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    exercise = {
        "symptom": "Llama 3.1 8B at batch 64 runs out of memory on one H100.",
        "predict": "Predict the KV cache bytes at batch 64 before running.",
        "lab": "memory-budget",
        "params": {"model": "llama-3.1-8b", "gpu": "h100", "batch": 64},
        "numeric_prediction": "kv_cache_bytes_per_gpu",
        "unit": "bytes",
        "next_step": "Lower the batch to 32 and measure again.",
    }
    write_card(content, "alpha", ["beta", "gamma"], exercise=exercise)
    with pytest.raises(ContentError) as err:
        load_catalogue(content, lab_ids())
    problems = [p for p in err.value.problems if "numeric_prediction" in p.message]
    assert len(problems) == 1 and problems[0].path.endswith("alpha.md"), err.value.problems
    source = (content / "terms" / "alpha.md").read_text().splitlines()
    assert "numeric_prediction: kv_cache_bytes_per_gpu" in source[problems[0].line - 1]
    write_card(content, "alpha", ["beta", "gamma"], exercise={**exercise, "unit": "GB",
               "numeric_prediction": "total_gb_per_gpu"})  # fmt: skip
    load_catalogue(content, lab_ids())


def _predicting_cards() -> list[str]:
    return sorted(
        slug
        for slug, t in catalogue().terms.items()
        if t.front.exercise.lab and t.front.exercise.numeric_prediction
    )


def test_every_calculator_card_prediction_is_a_number_its_run_reports() -> None:
    """Each card's lab, run with the card's params, reports a finite number under the
    key the card asks for (model labs: the key is in the result model, checked above)."""
    checked = 0
    for slug in _predicting_cards():
        ex = catalogue().terms[slug].front.exercise
        lab = get_lab(ex.lab or "")
        assert lab is not None
        assert list(prediction_problems(lab, dict(ex.params), ex.numeric_prediction, ex.unit)) == []
        if ex.lab in MODEL_LABS or ex.numeric_prediction in {c.key for c in lab.choice_outputs}:
            continue
        value = _number(_run(lab.id, dict(ex.params)), ex.numeric_prediction or "")
        assert value is not None and math.isfinite(value), slug
        checked += 1
    assert checked >= 20


# What the fixed cards say around the number they grade, computed by the labs.
def test_memory_budget_cards_state_its_2_gb_overhead_and_totals() -> None:
    for slug in ("batch-size", "context-parallelism", "inference", "rope-scaling"):
        r = _run("memory-budget", dict(catalogue().terms[slug].front.exercise.params))
        assert r["overhead_bytes_per_gpu"] == 2_000_000_000, slug
        assert "2 GB" in catalogue().terms[slug].front.exercise.predict, slug
    batch = _run("memory-budget", dict(catalogue().terms["batch-size"].front.exercise.params))
    assert batch["weights_gb"] == pytest.approx(16.06, abs=0.005)  # "the 16.06 GB of weights"
    rope = _run("memory-budget", dict(catalogue().terms["rope-scaling"].front.exercise.params))
    assert rope["total_gb_per_gpu"] > rope["gpu_capacity_gb"] and not rope["fits"]
    tp = _run("memory-budget", dict(catalogue().terms["tensor-parallelism"].front.exercise.params))
    assert tp["min_tensor_parallel"] == 4  # 8 × 8,192 tokens with the weights


def test_fp8_savings_cards_keep_the_cache_in_bf16() -> None:
    for slug in ("attention-backends", "cuda-graphs", "prefill-vs-decode"):
        r = _run("fp8-savings", dict(catalogue().terms[slug].front.exercise.params))
        assert r["kv_saved_gb_per_gpu"] == 0.0, slug  # "leave the bf16 cache as it is"
        assert 1 < r["speedup_same_batch"] < 2, slug
    graphs = catalogue().terms["cuda-graphs"].front.exercise.params
    slow = _run("fp8-savings", {**dict(graphs), "step_overhead_ms": 2.0})
    fast = _run("fp8-savings", dict(graphs))
    assert fast["speedup_same_batch"] > slow["speedup_same_batch"]  # the fixed cost hides it


def test_kv_capacity_cards_blocks_and_bytes() -> None:
    offload = _run("kv-capacity", dict(catalogue().terms["kv-offloading"].front.exercise.params))
    assert offload["block_bytes"] == 16 * offload["kv_bytes_per_token"]  # 16-token blocks
    assert offload["token_capacity"] == 16 * offload["total_blocks"]
    mla = _run(
        "kv-capacity", dict(catalogue().terms["multi-head-latent-attention"].front.exercise.params)
    )
    layers, kv_heads, head_dim, bf16 = 126, 8, 128, 2
    assert mla["kv_bytes_per_token"] == layers * kv_heads * head_dim * 2 * bf16
    gqa = _run(
        "kv-capacity", dict(catalogue().terms["grouped-query-attention"].front.exercise.params)
    )
    assert gqa["kv_bytes_per_token"] == 28 * 4 * 128 * 2 * bf16


def test_marlin_ratio_is_the_inverse_of_its_bound() -> None:
    r = _run("format-support", dict(catalogue().terms["marlin"].front.exercise.params))
    assert r["decode_speedup_bound"] == pytest.approx(1 / r["decode_bytes_ratio"])


def test_every_lab_output_a_card_may_predict_is_in_its_result_model() -> None:
    from labs.registry import all_labs

    for lab in all_labs().values():
        model = result_model(lab)
        assert model is not None, lab.id
        for key in [*dict(lab.numeric_outputs), *(c.key for c in lab.choice_outputs)]:
            assert holds(model, key), (lab.id, key)
