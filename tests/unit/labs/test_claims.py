"""labs.catalog.facts.claims: yes/no and threshold facts that prose used to state unchecked (issue 15)."""

from __future__ import annotations

import pytest
import torch

from labs.catalog import facts
from labs.catalog.gpus import BYTES_PER_MIB, get_gpu

SHARD_3 = {
    "model.norm.weight": {"dtype": "BF16", "shape": [256]},
    "lm_head.weight": {"dtype": "BF16", "shape": [512, 256]},
}


def test_llama_70b_bf16_fits_one_h200_by_the_driver_total_not_the_datasheet():
    # The audit's first error: 141.1e9 bytes "exceed 141 GB". The driver reports 143,771 MiB.
    args = {"model": "llama-3.1-70b", "weight_format": "bf16", "gpu": "h200"}
    free = facts.evaluate("gpu_free_bytes_after_weights", args)
    assert free == 143_771 * BYTES_PER_MIB - 141_107_412_992
    assert free / 2**30 == pytest.approx(8.98, abs=0.01)
    assert facts.evaluate("weights_fit_on_gpu", args) == 1
    # Read as the marketed 141e9 bytes it would not fit: the trap the fact avoids.
    assert get_gpu("h200").memory_bytes < 141_107_412_992
    # ... and a reserve larger than the spare bytes flips the answer.
    assert facts.evaluate("weights_fit_on_gpu", {**args, "reserve_gb": 10}) == 0


@pytest.mark.parametrize(
    ("model", "fmt", "gpu", "tp", "fits"),
    [
        ("llama-3.1-70b", "bf16", "h100", 1, 0),
        ("llama-3.1-70b", "bf16", "h100", 2, 1),
        ("mixtral-8x7b", "bf16", "h100", 1, 0),
        ("mixtral-8x7b", "bf16", "h200", 1, 1),
        ("llama-3.1-8b", "fp16", "t4", 1, 1),  # by 0.05 GB: the CUDA context does not fit
        ("llama-3.1-405b", "fp8", "h200", 1, 0),
    ],
)
def test_weights_fit_on_gpu(model, fmt, gpu, tp, fits):
    args = {"model": model, "weight_format": fmt, "gpu": gpu, "tensor_parallel": tp}
    assert facts.evaluate("weights_fit_on_gpu", args) == fits


def test_fit_facts_reject_bad_arguments():
    with pytest.raises(KeyError, match="unknown weight_format"):
        facts.evaluate(
            "weights_fit_on_gpu", {"model": "llama-3.1-8b", "weight_format": "fp6", "gpu": "h100"}
        )
    with pytest.raises(ValueError, match="tensor_parallel 3"):
        facts.evaluate(
            "gpu_free_bytes_after_weights",
            {
                "model": "llama-3.1-70b",
                "weight_format": "bf16",
                "gpu": "h100",
                "tensor_parallel": 3,
            },
        )


@pytest.mark.parametrize(
    ("gpu", "tensor_type", "has"),
    [("t4", "bf16", 0), ("v100", "bf16", 0), ("a100-80gb", "bf16", 1), ("h100", "int4", 0)],
)
def test_gpu_has_tensor_type(gpu, tensor_type, has):
    assert facts.evaluate("gpu_has_tensor_type", {"gpu": gpu, "tensor_type": tensor_type}) == has


def test_fp8_overflow_thresholds():
    assert facts.evaluate("fp8_overflow_threshold", {"dtype": "fp8_e4m3"}) == 464
    assert facts.evaluate("fp8_overflow_threshold", {"dtype": "fp8_e5m2"}) == 61440
    with pytest.raises(KeyError, match="fp8_e4m3 or fp8_e5m2"):
        facts.evaluate("fp8_overflow_threshold", {"dtype": "fp16"})


def test_e5m2_threshold_agrees_with_torch_rounding():
    # torch's e5m2 cast is IEEE-like on every path: the tie at 61440 rounds to inf.
    threshold = facts.evaluate("fp8_overflow_threshold", {"dtype": "fp8_e5m2"})
    below = torch.tensor([threshold - 1]).to(torch.float8_e5m2).float()
    at = torch.tensor([threshold]).to(torch.float8_e5m2).float()
    assert below.item() == facts.dtype_max("fp8_e5m2")
    assert torch.isinf(at).item()


def test_safetensors_layout_counts_the_length_prefix_once():
    # shard 3 of the shard-doctor checkpoint: 262,856 bytes on disk
    parts = {
        what: facts.evaluate(
            "safetensors_layout", {"tensors": SHARD_3, "what": what, "metadata": {"format": "pt"}}
        )
        for what in ("length_prefix", "header_length", "data_bytes", "file_bytes")
    }
    assert parts == {
        "length_prefix": 8,
        "header_length": 192,
        "data_bytes": 262_656,
        "file_bytes": 262_856,
    }
    assert (
        parts["file_bytes"] == parts["length_prefix"] + parts["header_length"] + parts["data_bytes"]
    )


def test_largest_block_aligned_tensor_parallel():
    # Qwen2.5-72B's 29,568-wide MLP is 231 int4 groups: no admitted TP above 1 keeps them whole.
    args = {"model": "qwen2.5-72b", "weight_format": "int4"}
    assert facts.evaluate("largest_block_aligned_tensor_parallel", args) == 1
    assert (
        facts.evaluate("largest_block_aligned_tensor_parallel", {**args, "weight_format": "bf16"})
        > 1
    )
    assert (
        facts.evaluate(
            "largest_block_aligned_tensor_parallel",
            {"model": "llama-3.1-70b", "weight_format": "int4"},
        )
        > 1
    )


def test_projection_bits_use_the_models_shapes_not_the_reference_matrix():
    from labs.format_support import file_bits_per_param

    real = facts.evaluate(
        "projection_bits_per_weight", {"model": "llama-3.1-70b", "weight_format": "fp8"}
    )
    assert real == pytest.approx(8.0031, abs=1e-4)
    # the format-support lab's 4096 × 4096 reference matrix pays twice the per-row cost
    assert file_bits_per_param("fp8") == pytest.approx(8 + 32 / 4096)
    assert real < file_bits_per_param("fp8")
    assert (
        facts.evaluate(
            "projection_bits_per_weight", {"model": "llama-3.1-70b", "weight_format": "awq"}
        )
        == 4 + 20 / 128
    )
