"""What the shipped model shows: quality falls with bits, GPTQ beats RTN, runs repeat."""

from __future__ import annotations

import pytest
import torch

from tests.unit.labs.helpers import run_lab

SMALL = {"eval_tokens": 1024}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def quality(fmt: str, **extra):
    res, _ = run_lab("model-quality", {**SMALL, "format": fmt, **extra})
    return res


def test_quality_is_monotone_in_bits() -> None:
    ladder = [
        quality("q8_0"),
        quality("q6_k"),
        quality("q4_0"),
        quality("int4", granularity="tensor"),
    ]
    kls = [r.kl_divergence for r in ladder]
    bits = [r.bits_per_weight for r in ladder]
    assert bits == sorted(bits, reverse=True)
    assert kls == sorted(kls), kls
    # q8_0 near-lossless; 4-bit measurably worse; per-tensor int4 clearly worse still.
    assert kls[0] < 0.01 and kls[2] > 2 * kls[0] and kls[3] > 2 * kls[2]


def test_keeping_tensors_shrinks_the_error_and_costs_bytes() -> None:
    plain = quality("q4_0")
    kept = quality("q4_0", keep=["down_proj"])
    assert kept.kl_divergence < plain.kl_divergence
    assert kept.weight_bytes > plain.weight_bytes
    assert len(kept.kept_tensors) == 4 and all(n.endswith("down_proj") for n in kept.kept_tensors)
    rows = {r.name: r for r in kept.tensor_table}
    assert rows["model.layers.0.mlp.down_proj"].sqnr_db is None
    assert rows["model.layers.0.mlp.up_proj"].sqnr_db > 10


def test_same_parameters_same_result() -> None:
    a = quality("nvfp4").model_dump()
    b = quality("nvfp4").model_dump()
    a.pop("seconds"), b.pop("seconds")
    assert a == b


def test_gptq_beats_rtn_on_heldout_kl_at_int4_g128() -> None:
    res, _ = run_lab(
        "quant-algorithms",
        {"format": "int4", "granularity": 128, "methods": ["rtn", "gptq", "awq"], **SMALL},
    )
    m = res.methods
    assert m["gptq"].heldout.kl_divergence < m["rtn"].heldout.kl_divergence
    assert m["gptq"].calibration.kl_divergence < m["rtn"].calibration.kl_divergence
    assert 0 < m["awq"].heldout.kl_divergence < 10 * m["rtn"].heldout.kl_divergence
    assert m["gptq"].weight_bytes == m["rtn"].weight_bytes == m["awq"].weight_bytes


def test_sensitivity_ranks_by_kl_and_the_mixed_recipe_sits_between() -> None:
    res, events = run_lab("tensor-sensitivity", {"eval_tokens": 512, "uniform": ["q8_0"]})
    kls = [r.kl_divergence for r in res.ranking]
    assert kls == sorted(kls, reverse=True) and len(kls) == 7
    assert res.mixed.kl_divergence < max(kls) * 7
    assert any(kind == "plot" for kind, _ in events)


@pytest.mark.parametrize("granularity", ["per-token", "kivi", "per-head", "per-tensor"])
def test_kv_quant_runs_and_int8_is_gentler_than_int4(granularity: str) -> None:
    four, _ = run_lab("kv-quant", {"kv_format": "int4", "granularity": granularity, **SMALL})
    eight, _ = run_lab("kv-quant", {"kv_format": "int8", "granularity": granularity, **SMALL})
    assert 0 < eight.kl_divergence < four.kl_divergence
    assert len(four.kl_by_position) == 8
