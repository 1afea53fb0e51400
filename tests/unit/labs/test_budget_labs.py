"""The four arithmetic labs, run through EventContext exactly as the worker runs them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from labs import fp8_savings, kv_capacity, memory_budget, qlora_budget
from tests.unit.labs.helpers import run_lab

MODULES = (memory_budget, qlora_budget, kv_capacity, fp8_savings)


@pytest.mark.parametrize("module", MODULES)
def test_unknown_keys_and_models_are_rejected(module):
    with pytest.raises(ValidationError):
        module.Params.model_validate({"modle": "llama-3.1-8b"})
    with pytest.raises(ValidationError, match="model"):
        module.Params.model_validate({"model": "gpt-5"})
    with pytest.raises(ValidationError, match="gpu"):
        module.Params.model_validate({"gpu": "h800"})


def test_importing_the_labs_imports_no_numeric_stack():
    code = (
        "import sys, labs.memory_budget, labs.qlora_budget, labs.kv_capacity, labs.fp8_savings, labs.catalog.facts; "
        "bad = {'torch', 'numpy', 'matplotlib'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- memory-budget ---------------------------------------------------------


def test_memory_budget_default_70b_bf16_needs_two_h100s():
    r, _ = run_lab(memory_budget)
    assert r.param_count == 70_553_706_496
    assert r.weights_gb == pytest.approx(141.107, abs=0.001)
    assert r.kv_bytes_per_token == 327_680
    assert not r.fits and r.min_tensor_parallel == 2
    assert r.gpu_capacity_bytes == 80 * 10**9
    assert r.gpu_capacity_gib == pytest.approx(80e9 / 2**30)
    assert r.total_gib_per_gpu == pytest.approx(r.total_bytes_per_gpu / 2**30)
    assert r.total_gb_per_gpu == pytest.approx(r.total_bytes_per_gpu / 1e9)


def test_min_tensor_parallel_respects_block_alignment():
    # Qwen2.5-72B int4 (group 128) on A100 40GB: TP 2 holds the bytes, but its MLP width
    # 29568 = 231 × 128 splits into whole groups at no TP above 1.
    r, _ = run_lab(
        memory_budget, {"model": "qwen2.5-72b", "weight_format": "int4", "gpu": "a100-40gb"}
    )
    assert not r.fits and r.min_tensor_parallel is None
    (note,) = [n for n in r.notes if n.startswith("Block alignment")]
    assert "TP 2 would hold the bytes" in note and "29568 inputs / TP 2 = 14784" in note
    assert not any(n.startswith("No tensor-parallel size") for n in r.notes)
    # On an H100 TP 1 fits, and TP 1 needs no alignment.
    h100, _ = run_lab(
        memory_budget, {"model": "qwen2.5-72b", "weight_format": "int4", "tensor_parallel": 1}
    )
    assert h100.fits and h100.min_tensor_parallel == 1
    assert not any(n.startswith("Block alignment") for n in h100.notes)


def test_memory_budget_tp2_fits_and_divides_the_model():
    one, _ = run_lab(memory_budget, {"tensor_parallel": 1})
    two, _ = run_lab(memory_budget, {"tensor_parallel": 2})
    assert two.fits and two.headroom_bytes_per_gpu > 0
    norms = next(t.bytes_total for t in two.weights_by_kind if t.kind == "norm")
    assert two.weights_bytes_per_gpu * 2 == one.weights_bytes_per_gpu + norms  # norms replicated
    assert two.kv_bytes_per_token_per_gpu * 2 == two.kv_bytes_per_token
    assert two.kv_cache_bytes_per_gpu == 8192 * 327_680 // 2
    sharding = {t.kind: t.sharding for t in two.weights_by_kind}
    assert sharding["norm"] == "replicated" and sharding["attn_o"] == "split by columns"


def test_memory_budget_fp8_70b_fits_one_h100_and_405b_needs_sixteen():
    fp8, _ = run_lab(memory_budget, {"weight_format": "fp8", "context_tokens": 4096})
    assert fp8.fits and fp8.min_tensor_parallel == 1
    big, _ = run_lab(memory_budget, {"model": "llama-3.1-405b", "tensor_parallel": 8})
    assert not big.fits and big.min_tensor_parallel == 16
    on_h200, _ = run_lab(
        memory_budget, {"model": "llama-3.1-405b", "tensor_parallel": 8, "gpu": "h200"}
    )
    assert on_h200.fits


def test_memory_budget_capacity_basis_and_notes():
    smi, _ = run_lab(memory_budget, {"tensor_parallel": 2, "capacity_basis": "nvidia-smi"})
    assert smi.gpu_capacity_bytes == 81_559 * 2**20
    tp16, _ = run_lab(memory_budget, {"tensor_parallel": 16})
    assert tp16.kv_bytes_per_token_per_gpu == 327_680 // 8
    assert any("replicated" in n for n in tp16.notes)
    qwen, _ = run_lab(
        memory_budget, {"model": "qwen2.5-72b", "weight_format": "int4", "tensor_parallel": 8}
    )
    assert any("3696" in n for n in qwen.notes)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"tensor_parallel": 3}, "tensor_parallel"),
        ({"model": "qwen2.5-7b", "tensor_parallel": 8}, "tensor_parallel"),
        ({"batch": -1}, "batch"),
        ({"batch": 0}, "batch"),
        ({"context_tokens": 200_000}, "context_tokens"),
        ({"weight_format": "fp6"}, "weight_format"),
        ({"kv_dtype": "int4"}, "kv_dtype"),
        ({"overhead_gb": -1}, "overhead_gb"),
    ],
)
def test_memory_budget_rejects_bad_params(params, field):
    with pytest.raises(ValidationError) as err:
        memory_budget.Params.model_validate(params)
    assert err.value.errors()[0]["loc"] == (field,)


def test_memory_budget_tp_error_lists_the_valid_sizes():
    with pytest.raises(
        ValidationError, match="valid tensor_parallel sizes: 1, 2, 4, 8, 16, 32, 64"
    ):
        memory_budget.Params(tensor_parallel=3)


# --- qlora-budget ----------------------------------------------------------


def test_qlora_default_llama_8b_fits_a_t4():
    r, _ = run_lab(qlora_budget)
    assert r.fits and r.verdict == "fits"
    assert r.trainable_params == 41_943_040  # r=16 on all seven projections of Llama 3 8B
    assert r.base_bits_per_quantized_param == pytest.approx(4.127, abs=0.001)
    assert r.lora_scaling == 2.0
    assert r.total_bytes == sum(c.bytes for c in r.components)
    assert r.max_micro_batch >= 1


def test_qlora_without_checkpointing_or_on_a_big_model_does_not_fit():
    no_gc, _ = run_lab(qlora_budget, {"gradient_checkpointing": False})
    assert not no_gc.fits and no_gc.max_micro_batch == 0
    big, _ = run_lab(qlora_budget, {"model": "llama-3.1-70b", "gpu": "rtx-4090"})
    assert big.verdict == "does not fit"
    on_80, _ = run_lab(qlora_budget, {"model": "llama-3.1-70b", "gpu": "a100-80gb"})
    assert on_80.fits


def test_qlora_double_quant_optimizer_and_upcast_change_the_bytes():
    default, _ = run_lab(qlora_budget)
    plain, _ = run_lab(
        qlora_budget, {"double_quant": False, "optimizer": "adamw", "upcast_non_quantized": False}
    )
    assert plain.base_bits_per_quantized_param == 4.5
    parts = {c.name: c.bytes for c in plain.components}
    base = {c.name: c.bytes for c in default.components}
    assert parts["optimizer states"] == 2 * 4 * 41_943_040  # two fp32 states per fp32 adapter param
    assert base["base weights (not quantized)"] == 2 * parts["base weights (not quantized)"]
    assert parts["LoRA weights"] == parts["LoRA gradients"] == 4 * 41_943_040


def test_qlora_nf4_without_double_quant_matches_the_memory_rules():
    from labs.catalog import memory
    from labs.catalog.models import get_model, linear_shapes

    m = get_model("llama-3.1-8b")
    r, _ = run_lab(qlora_budget, {"double_quant": False})
    nf4 = next(c.bytes for c in r.components if c.name == "base weights (NF4)")
    assert nf4 == sum(memory.group_bytes(m, g, "nf4") for g in linear_shapes(m))


def test_qlora_rejects_bad_params():
    with pytest.raises(ValidationError, match="twice"):
        qlora_budget.Params(target_modules=["q", "q"])
    with pytest.raises(ValidationError):
        qlora_budget.Params.model_validate({"target_modules": ["lm_head"]})
    with pytest.raises(ValidationError):
        qlora_budget.Params(rank=0)
    with pytest.raises(ValidationError, match="seq_len"):
        qlora_budget.Params(model="mistral-7b", seq_len=65536)


# --- kv-capacity -----------------------------------------------------------


def test_kv_capacity_default_blocks_and_prefix_sharing():
    r, _ = run_lab(kv_capacity)
    assert r.kv_bytes_per_token == 131_072 and r.block_bytes == 16 * 131_072
    # 0.9 × 80 GB − 16.06 GB of weights − 2 GB overhead, in 2 MiB blocks.
    assert r.pool_bytes_per_gpu == 72_000_000_000 - 16_060_522_496 - 2_000_000_000
    assert r.total_blocks == r.pool_bytes_per_gpu // (16 * 131_072)
    assert (
        r.blocks_per_request == 94 and r.shared_blocks == 31 and r.private_blocks_per_request == 63
    )
    assert r.max_concurrent_requests == (r.total_blocks - 31) // 63
    assert r.max_concurrent_without_sharing == r.total_blocks // 94
    assert r.max_concurrent_requests > r.max_concurrent_without_sharing
    assert not r.requests_wait
    assert r.fp8_max_concurrent_requests >= 2 * r.max_concurrent_requests


def test_kv_capacity_overload_waits_and_no_room_is_reported():
    busy, _ = run_lab(kv_capacity, {"arrival_rate_per_s": 100, "request_seconds": 30})
    assert busy.requests_wait and busy.occupancy_needed == pytest.approx(3000)
    none, _ = run_lab(kv_capacity, {"model": "llama-3.1-70b"})
    assert (
        none.max_concurrent_requests == 0 and none.requests_wait and none.cache_utilization is None
    )


def test_kv_capacity_rejects_bad_params():
    with pytest.raises(ValidationError, match="longer than the prompt"):
        kv_capacity.Params(prompt_tokens=100, shared_prefix_tokens=200)
    with pytest.raises(ValidationError):
        kv_capacity.Params.model_validate({"block_size": 12})
    with pytest.raises(ValidationError, match="tensor_parallel"):
        kv_capacity.Params(tensor_parallel=3)


# --- fp8-savings -----------------------------------------------------------


def test_fp8_savings_default_70b_on_two_h100s():
    r, _ = run_lab(fp8_savings)
    assert r.bf16.fits and r.fp8.fits
    assert r.weights_saved_gb_per_gpu == pytest.approx(34.2, abs=0.1)
    assert r.kv_saved_gb_per_gpu == 0
    assert 1.5 < r.speedup_same_batch < 2.0
    assert r.max_batch_fp8 > 4 * r.max_batch_bf16
    assert r.bf16.bound == "memory" and r.fp8.compute_dtype == "fp8"


def test_fp8_kv_cache_and_a_gpu_without_fp8():
    kv, _ = run_lab(fp8_savings, {"fp8_kv_cache": True})
    assert kv.kv_saved_gb_per_gpu == pytest.approx(kv.bf16.kv_bytes_per_gpu / 2 / 1e9)
    a100, _ = run_lab(fp8_savings, {"gpu": "a100-80gb"})
    assert a100.fp8.compute_dtype == "bf16" and any("no FP8 tensor cores" in n for n in a100.notes)


def test_a_configuration_that_does_not_fit_reports_no_step_time():
    r, events = run_lab(fp8_savings, {"batch": 32})
    assert not r.bf16.fits and r.fp8.fits  # bf16 holds 11 sequences, fp8 62
    assert r.bf16.step_ms is None and r.bf16.tokens_per_s is None and r.bf16.bound is None
    assert r.fp8.step_ms is not None and r.fp8.tokens_per_s is not None
    assert r.speedup_same_batch is None and r.step_ms_saved is None
    table = next(d for k, d in events if k == "table")
    rows = {row[0]: row[1:] for row in table["rows"]}
    assert rows["step time (ms)"][0] == rows["tokens/s at this batch"][0] == "does not fit"
    assert rows["bound by"] == ["does not fit", "memory"]
    metrics = {d["name"] for k, d in events if k == "metric"}
    assert "speedup_same_batch" not in metrics
    # The batches that do fit are still compared.
    assert r.bf16.step_ms_at_max_batch is not None and r.bf16.best_batch_under_target > 0


def test_fp8_savings_step_bytes_leave_out_the_embedding_table():
    from labs.catalog import memory
    from labs.catalog.models import get_model

    r, _ = run_lab(fp8_savings)
    m70 = get_model("llama-3.1-70b")
    embedding = memory.weight_bytes_by_kind(m70, "bf16", 2)["embedding"]
    row = 2 * m70.hidden_size
    assert r.bf16.step_weight_bytes == r.bf16.weights_bytes_per_gpu - embedding + 8 * row
    lm_head = memory.weight_bytes_by_kind(m70, "fp8", 2)["lm_head"]
    assert r.fp8.step_weight_bytes > lm_head  # the lm_head is read in full


def test_fp8_latency_target_limits_the_batch():
    tight, _ = run_lab(fp8_savings, {"latency_target_ms": 20})
    assert tight.bf16.best_batch_under_target == 0 and tight.throughput_gain_at_target is None
    assert 0 < tight.fp8.best_batch_under_target < tight.fp8.max_batch


def test_kv_capacity_keeps_output_tokens_as_given() -> None:
    # Regression: the context check once returned prompt + output as the output length.
    from labs.kv_capacity import Params

    p = Params.model_validate({"prompt_tokens": 4000, "output_tokens": 500})
    assert p.output_tokens == 500
