"""Fact functions added for issue 23's audit, checked against independent arithmetic.

Each expected value is worked out here from the model's config.json shapes, the
GPU datasheet or the vendor's formula, not by calling the function under test a
second way, so a wrong implementation cannot agree with itself.
"""

from __future__ import annotations

import pytest

from labs.catalog import facts
from labs.catalog.models import get_model

GB = 1e9
LLAMA_8B = "llama-3.1-8b"


def test_a_decode_step_reads_one_embedding_row_not_the_table() -> None:
    llama = get_model(LLAMA_8B)
    table = llama.vocab_size * llama.hidden_size * 2  # bf16 bytes of the embedding table
    one_row = llama.hidden_size * 2
    stored = facts.weight_bytes(LLAMA_8B, "bf16")
    assert facts.weight_bytes_read_per_step(LLAMA_8B, "bf16") == stored - table + one_row
    # Marlin's 3.23x is the ratio of bytes read, not of the files (2.82x).
    read = facts.weight_bytes_read_per_step(LLAMA_8B, "bf16") / facts.weight_bytes_read_per_step(
        LLAMA_8B, "int4"
    )
    files = stored / facts.weight_bytes(LLAMA_8B, "int4")
    assert read == pytest.approx(3.228, abs=5e-4)
    assert files == pytest.approx(2.817, abs=5e-4)


def test_moe_reads_only_the_experts_a_batch_touches() -> None:
    one = facts.weight_bytes_read_per_step("mixtral-8x7b", "fp8", batch=1)
    eight = facts.weight_bytes_read_per_step("mixtral-8x7b", "fp8", batch=8)
    assert one == pytest.approx(12.89 * GB, rel=1e-3)
    assert eight == pytest.approx(42.22 * GB, rel=1e-3)


def test_expected_experts_follow_the_binomial_count() -> None:
    # 8 experts, top 2: an expert is missed by one token with probability 6/8.
    assert facts.expected_active_experts("mixtral-8x7b", 8) == pytest.approx(8 * (1 - 0.75**8))
    assert facts.expected_active_experts("mixtral-8x7b", 1) == pytest.approx(2)
    assert facts.expected_active_experts(LLAMA_8B, 64) == 1


def test_decode_step_without_a_chunk_is_the_labs_step() -> None:
    lab = facts.evaluate(
        "lab_result",
        {
            "lab": "fp8-savings",
            "key": "bf16.step_ms",
            "params": {"model": LLAMA_8B, "gpu": "h100", "tensor_parallel": 1, "batch": 32},
        },
    )
    step = facts.decode_step_ms(LLAMA_8B, "h100", batch=32, context_tokens=4096)
    assert step == pytest.approx(lab, rel=1e-9)


def test_a_512_token_chunk_hides_under_the_memory_time_at_batch_32() -> None:
    """The audit's point: at batch 32 the chunk's FLOPs fit under the step's memory time."""
    memory = facts.decode_step_ms(LLAMA_8B, "h100", 32, 4096, what="memory")
    first = facts.decode_step_ms(LLAMA_8B, "h100", 32, 4096, chunk_tokens=512, what="compute")
    last = facts.decode_step_ms(
        LLAMA_8B, "h100", 32, 4096, chunk_tokens=512, chunk_offset=15_488, what="compute"
    )
    llama = get_model(LLAMA_8B)
    matrices = facts.param_count(LLAMA_8B) - 2 * llama.vocab_size * llama.hidden_size
    by_hand_ms = 2 * matrices * 512 / 989.5e12 * 1e3  # the chunk's weight FLOPs alone, at peak
    assert first > by_hand_ms and first < memory
    assert first < last < memory + 1  # attention over 15,488 earlier tokens, still near memory
    base = facts.decode_step_ms(LLAMA_8B, "h100", 32, 4096)
    with_last = facts.decode_step_ms(
        LLAMA_8B, "h100", 32, 4096, chunk_tokens=512, chunk_offset=15_488
    )
    assert 0 < with_last - base < 1.0  # not "8-14 ms longer"


def test_an_unchunked_prompt_is_the_long_stall() -> None:
    whole = facts.decode_step_ms(LLAMA_8B, "h100", 32, 4096, chunk_tokens=16_000, what="compute")
    assert whole == pytest.approx(294.1, rel=2e-3)


def test_step_rejects_unknown_parts() -> None:
    with pytest.raises(KeyError, match="unknown part"):
        facts.decode_step_ms(LLAMA_8B, "h100", 1, 1, what="latency")


def test_gqa_shards_while_mla_replicates_under_tensor_parallelism() -> None:
    whole_405b = facts.kv_bytes_per_token("llama-3.1-405b", "bf16")
    assert facts.kv_bytes_per_token_per_gpu("llama-3.1-405b", "bf16", 8) == whole_405b // 8
    # Qwen2.5 7B has 4 KV heads: beyond TP 4 each GPU keeps one head per layer.
    qwen = facts.kv_bytes_per_token("qwen2.5-7b", "bf16")
    assert facts.kv_bytes_per_token_per_gpu("qwen2.5-7b", "bf16", 8) == qwen // 4
    deepseek = 61 * (512 + 64) * 2  # layers x (latent + rotary key) x bf16 bytes
    for tp in (1, 8):
        assert facts.mla_kv_bytes_per_token("deepseek-v3", "bf16", tp) == deepseek
    assert facts.mla_kv_bytes_per_token("deepseek-v3", "fp8") == deepseek // 2
    assert facts.mla_kv_bytes_per_token("deepseek-v3", "bf16", 8) > whole_405b // 8


def test_mla_rejects_unknown_models_and_dtypes() -> None:
    with pytest.raises(KeyError, match="deepseek-v3"):
        facts.mla_kv_bytes_per_token("llama-3.1-8b")
    with pytest.raises(KeyError, match="kv_dtype"):
        facts.mla_kv_bytes_per_token("deepseek-v3", "int2")


def test_delayed_scaling_margin_buys_headroom() -> None:
    """Transformer Engine: the FP8 tensor's max is 2^-margin * fp8_max (x / s convention)."""
    for margin in (0, 1, 2):
        s = facts.delayed_scaling_scale(100.0, "fp8_e4m3", margin)
        assert 100.0 / s == pytest.approx(448 / 2**margin)
    assert facts.delayed_scaling_scale(100.0, "fp8_e4m3", 1) == pytest.approx(0.4464, abs=1e-4)
    with pytest.raises(ValueError, match="positive"):
        facts.delayed_scaling_scale(0.0)


def test_binades_of_bf16_and_fp16() -> None:
    # bf16: 8 exponent bits, normals from 2^-126 to just under 2^128; fp16: 2^-14 to under 2^16.
    assert facts.dtype_binades("bf16") == pytest.approx(254, abs=0.01)
    assert facts.dtype_binades("fp16") == pytest.approx(30, abs=0.01)
    assert facts.dtype_binades("bf16") - facts.dtype_binades("fp16") == pytest.approx(224, abs=0.02)


@pytest.mark.parametrize(
    ("gpu", "threads", "registers", "shared", "what", "expected"),
    [
        # CUDA occupancy calculator: 100 KiB blocks, 228 KiB per SM, 1 KiB reserved each → 2.
        ("h100", 256, 32, 100 * 1024, "blocks_per_sm", 2),
        ("h100", 256, 32, 100 * 1024, "occupancy", 0.25),
        ("h100", 256, 32, 75 * 1024, "blocks_per_sm", 3),
        # 96 registers x 256 threads = 24,576 per block; 65,536 / 24,576 → 2 blocks, 16 warps.
        ("a100-80gb", 256, 96, 0, "warps_per_sm", 16),
        # 32-thread blocks hit the 24-block slot limit of compute capability 8.9.
        ("l4", 32, 32, 0, "warps_per_sm", 24),
        ("l40s", 256, 32, 0, "occupancy", 1.0),
        # 1,024 threads x 72 registers = 73,728 > 65,536 registers one block may use.
        ("h100", 1024, 72, 0, "launches", 0),
        # 255 registers round to 256 per thread: 256 threads use exactly 65,536.
        ("h100", 256, 255, 0, "launches", 1),
        ("h100", 512, 255, 0, "launches", 0),
        # 164 KiB per SM on 8.0 but at most 163 KiB per block.
        ("a100-80gb", 128, 32, 163 * 1024, "launches", 1),
        ("a100-80gb", 128, 32, 164 * 1024, "launches", 0),
        ("t4", 1024, 32, 0, "warps_per_sm", 32),
    ],
)
def test_occupancy_matches_the_programming_guide(gpu, threads, registers, shared, what, expected):
    args = {
        "gpu": gpu,
        "threads_per_block": threads,
        "registers_per_thread": registers,
        "shared_bytes_per_block": shared,
        "what": what,
    }
    assert facts.evaluate("occupancy", args) == pytest.approx(expected)


def test_occupancy_of_a_block_that_cannot_launch_is_zero() -> None:
    assert facts.evaluate("occupancy", {"gpu": "h100", "threads_per_block": 2048}) == 0
