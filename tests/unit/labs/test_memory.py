"""Accounting rules: weight formats, tensor-parallel sharding, the decode roofline."""

from __future__ import annotations

from typing import Any

import pytest

from labs.catalog import formats, memory, roofline
from labs.catalog.gpus import get_gpu
from labs.catalog.models import get_model, param_count

M70 = get_model("llama-3.1-70b")


@pytest.mark.parametrize(
    ("fmt", "bits"),
    [
        ("nvfp4", 4.5),
        ("mxfp4", 4.25),
        ("nf4", 4.5),
        ("q4_0", 4.5),
        ("q8_0", 8.5),
        ("int4", 4.125),
        ("awq", 4 + 16 / 128 + 4 / 128),  # fp16 scale + 4-bit zero point per group of 128
    ],
)
def test_block_formats_bits_per_value(fmt, bits):
    assert formats.WEIGHT_FORMATS[fmt].bits_per_value == bits


def test_int4_bits_match_labs_quant_with_fp16_scales():
    from labs.quant import bits_per_value

    fp16 = bits_per_value("int4", granularity=128, scale_dtype="fp16")
    assert formats.WEIGHT_FORMATS["int4"].bits_per_value == fp16 == 4.125
    # AWQ's 4-bit zero points: labs.quant's zero_point=True with fp16 scales.
    awq = bits_per_value("int4", granularity=128, scale_dtype="fp16", zero_point=True)
    assert formats.WEIGHT_FORMATS["awq"].bits_per_value == awq
    assert formats.WEIGHT_FORMATS["awq"].matrix_bytes(1, 128) == 64 + 2 + 1  # codes, scale, zp
    # A GPTQ file: AWQ's per-group fields plus g_idx, one int32 per input column.
    gptq = formats.WEIGHT_FORMATS["gptq"]
    assert gptq.bits_per_value == awq
    assert gptq.matrix_bytes(1, 128) == 64 + 2 + 1 + 128 * 4
    assert gptq.matrix_bytes(8, 256) == 8 * 128 + 16 * 2 + 16 // 2 + 256 * 4


# Each quantized checkpoint format and the labs.quant configuration that stores the same.
QUANT_CONFIGURATIONS = {
    "fp8": ("fp8_e4m3", {"granularity": "channel"}),
    "int8": ("int8", {}),
    "int4": ("int4", {"scale_dtype": "fp16"}),
    "awq": ("int4", {"scale_dtype": "fp16", "zero_point": True}),
    "gptq": ("int4", {"scale_dtype": "fp16", "zero_point": True}),
    "nvfp4": ("nvfp4", {}),
    "mxfp4": ("mxfp4", {}),
    "nf4": ("nf4", {}),
    "q4_0": ("q4_0", {}),
    "q8_0": ("q8_0", {}),
}


def test_quantized_weight_formats_are_labs_quant_rows():
    """memory keeps no block sizes or scale bits of its own: every quantized checkpoint
    format is a row of labs.quant.spec as labs.quant would configure it."""
    from labs.quant import FORMATS

    quantized = {k for k, f in formats.WEIGHT_FORMATS.items() if f.quantized}
    assert quantized == set(QUANT_CONFIGURATIONS)
    for key, (quant_key, options) in QUANT_CONFIGURATIONS.items():
        fmt = formats.WEIGHT_FORMATS[key]
        assert fmt.spec == FORMATS[quant_key].configure(**options).spec, key
        # Whole blocks: the checkpoint bytes are what labs.quant stores for the matrix.
        assert fmt.matrix_bytes(8, 512) - 512 * fmt.column_bits // 8 == fmt.spec.storage_bytes(
            8, 512
        ), key


def test_gguf_block_bytes_match_the_ggml_layout():
    # One row of 32 values is exactly one GGUF block: 18 bytes for Q4_0, 34 for Q8_0.
    assert formats.WEIGHT_FORMATS["q4_0"].matrix_bytes(1, 32) == 18
    assert formats.WEIGHT_FORMATS["q8_0"].matrix_bytes(1, 32) == 34
    # NVFP4: 16 values = 8 bytes of codes + 1 E4M3 scale, plus a 4-byte fp32 tensor scale.
    assert formats.WEIGHT_FORMATS["nvfp4"].matrix_bytes(1, 16) == 8 + 1 + 4


def test_plain_dtypes_apply_to_every_tensor():
    n = param_count(M70)
    assert memory.weight_bytes(M70, "fp32") == 4 * n
    assert memory.weight_bytes(M70, "fp16") == memory.weight_bytes(M70, "bf16") == 2 * n


def test_quantized_formats_keep_embeddings_and_norms_in_bf16():
    by_kind = memory.weight_bytes_by_kind(M70, "fp8")
    assert by_kind["embedding"] == by_kind["lm_head"] == 2 * 128256 * 8192
    assert by_kind["norm"] == 2 * (2 * 80 + 1) * 8192
    # One fp8 byte per projection weight plus one fp32 scale per output channel.
    assert by_kind["attn_q"] == 80 * (8192 * 8192 + 4 * 8192)
    assert memory.weight_bytes(M70, "fp8") / 1e9 == pytest.approx(72.683, abs=0.001)
    assert memory.weight_bytes(M70, "nvfp4") / 1e9 == pytest.approx(42.709, abs=0.001)


def test_tensor_parallel_splits_sharded_tensors_and_replicates_norms():
    whole = memory.weight_bytes_by_kind(M70, "bf16", 1)
    tp8 = memory.weight_bytes_by_kind(M70, "bf16", 8)
    for kind in ("embedding", "attn_q", "attn_k", "attn_o", "mlp_down", "lm_head"):
        assert tp8[kind] * 8 == whole[kind]
    assert tp8["norm"] == whole["norm"]


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    # 8 KV heads: TP 8 gives one head per GPU, TP 16 still one (replicated twice).
    assert memory.kv_bytes_per_token(M70, "bf16", 8) == 327_680 // 8
    assert memory.kv_bytes_per_token(M70, "bf16", 16) == 327_680 // 8
    k_whole = memory.weight_bytes_by_kind(M70, "bf16", 1)["attn_k"]
    assert memory.weight_bytes_by_kind(M70, "bf16", 16)["attn_k"] == k_whole // 8


@pytest.mark.parametrize(
    ("model_id", "tp", "ok"),
    [
        ("llama-3.1-70b", 3, False),  # 64 heads
        ("llama-3.1-70b", 16, True),  # KV heads replicated
        ("qwen2.5-7b", 8, False),  # 28 heads
        ("qwen2.5-7b", 4, True),
        ("qwen2.5-7b", 7, False),  # 7 neither divides nor is a multiple of 4 KV heads
    ],
)
def test_tensor_parallel_validity(model_id, tp, ok):
    assert (memory.valid_tensor_parallel(get_model(model_id), tp) is None) is ok


def test_block_alignment_problem_for_qwen_72b_int4_tp8():
    problems = memory.block_alignment_problems(get_model("qwen2.5-72b"), "int4", 8)
    assert len(problems) == 1 and "3696" in problems[0]
    # 29568 / 128 = 231 groups, odd: every TP > 1 splits a group (Qwen's own int4
    # checkpoints pad the MLP to 29696 for this reason). Llama 70B splits cleanly.
    assert memory.block_alignment_problems(get_model("qwen2.5-72b"), "int4", 2)
    assert memory.block_alignment_problems(get_model("qwen2.5-72b"), "int4", 1) == []
    assert memory.block_alignment_problems(M70, "int4", 8) == []


def test_gb_and_gib_are_different_units():
    assert memory.gb(2**30) == pytest.approx(1.073741824)
    assert memory.gib(10**9) == pytest.approx(0.9313225746)


def test_decode_roofline_is_memory_bound_and_fp8_is_faster():
    h100 = get_gpu("h100")
    kwargs: dict[str, Any] = {
        "kv_dtype": "bf16",
        "tp": 2,
        "batch": 1,
        "context_tokens": 1,
        "overhead_ms": 0.0,
    }
    bf16 = roofline.decode_step(M70, h100, weight_format="bf16", **kwargs)
    fp8 = roofline.decode_step(M70, h100, weight_format="fp8", **kwargs)
    assert bf16.bound == fp8.bound == "memory"
    # Every weight but the embedding table, of which one row is looked up.
    embedding = memory.weight_bytes_by_kind(M70, "bf16", 2)["embedding"]
    read = memory.weight_bytes(M70, "bf16", 2) - embedding + 8192 * 2
    assert bf16.weight_bytes == read
    expected = read / (3.35e12 * roofline.DEFAULT_BANDWIDTH_EFFICIENCY)
    assert bf16.seconds == pytest.approx(expected, rel=1e-3)
    assert 1.8 < bf16.seconds / fp8.seconds < 2.0


def test_decode_reads_one_embedding_row_per_sequence_and_the_whole_lm_head():
    import dataclasses

    by_kind = memory.weight_bytes_by_kind(M70, "fp8", 1)
    row = 2 * M70.hidden_size  # one bf16 embedding row
    everything_else = sum(by_kind.values()) - by_kind["embedding"]
    for batch in (1, 8):
        read = roofline.weight_bytes_read_per_step(M70, "fp8", 1, batch)
        assert read == everything_else + batch * row
    # Under TP the vocabulary is split: at most a shard's rows are looked up per GPU.
    shard_rows = -(-M70.vocab_size // 2)
    huge = roofline.weight_bytes_read_per_step(M70, "bf16", 2, 10**6)
    assert huge == memory.weight_bytes(M70, "bf16", 2)
    assert shard_rows * row == memory.weight_bytes_by_kind(M70, "bf16", 2)["embedding"]
    # A tied embedding is the lm_head: read in full.
    tied = dataclasses.replace(M70, tie_word_embeddings=True)
    whole = memory.weight_bytes(tied, "bf16")
    assert roofline.weight_bytes_read_per_step(tied, "bf16", 1, 1) == whole


def test_moe_decode_reads_only_routed_experts():
    mixtral = get_model("mixtral-8x7b")
    assert roofline.expected_active_experts(mixtral, 1) == pytest.approx(2.0)
    assert roofline.expected_active_experts(mixtral, 1000) == pytest.approx(8.0)
    one = roofline.weight_bytes_read_per_step(mixtral, "bf16", 1, 1)
    assert one < memory.weight_bytes(mixtral, "bf16") / 3


def test_compute_dtype_falls_back_without_native_support():
    assert roofline.compute_dtype(get_gpu("h100"), "fp8") == "fp8"
    assert roofline.compute_dtype(get_gpu("a100-80gb"), "fp8") == "bf16"
    assert roofline.compute_dtype(get_gpu("t4"), "bf16") == "fp16"
    assert roofline.compute_dtype(get_gpu("b200"), "nvfp4") == "fp4"


def test_smallest_fitting_tp_can_require_block_alignment():
    qwen, a100 = get_model("qwen2.5-72b"), get_gpu("a100-40gb")
    kwargs: dict[str, Any] = {"weight_format": "int4", "kv_dtype": "bf16", "kv_tokens": 8192}
    # TP 2 holds the bytes, but 29568 / 2 inputs is not whole groups of 128, nor any TP > 1.
    assert memory.min_fitting_tensor_parallel(qwen, a100, **kwargs) == 2
    assert memory.min_fitting_tensor_parallel(qwen, a100, block_aligned=True, **kwargs) is None
    # Llama 3.1 70B (MLP width 28672 = 224 × 128) aligns at every valid TP.
    assert memory.min_fitting_tensor_parallel(
        M70, a100, block_aligned=True, **kwargs
    ) == memory.min_fitting_tensor_parallel(M70, a100, **kwargs)
