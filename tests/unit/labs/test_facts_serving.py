"""labs.catalog.facts.serving, facts_moe and facts_decoding: KV layouts, transfers, ring attention,
MoE traffic, RoPE, sampling.

Where a library computes the same number (transformers' RoPE initialisers and logits
warpers, the qlora-budget lab, the decode roofline of labs.catalog.memory) the fact is checked
against it, not against a copy of its own formula.
"""

from __future__ import annotations

import math

import pytest
import torch

from labs.catalog import facts, roofline
from labs.catalog.gpus import get_gpu
from labs.catalog.models import get_model


def ev(fn: str, **args: object) -> float:
    return facts.evaluate(fn, args)


def test_full_attention_cache_is_bytes_per_token_times_tokens():
    per_token = ev("kv_bytes_per_token", model="llama-3.1-8b", kv_dtype="bf16")
    full = ev("kv_cache_bytes", model="llama-3.1-8b", kv_dtype="bf16", context_tokens=131_072)
    assert full == per_token * 131_072 == 16 * 2**30
    assert ev(
        "kv_cache_bytes", model="qwen2.5-72b", kv_dtype="fp8", context_tokens=1000, batch=3
    ) == 3 * 1000 * ev("kv_bytes_per_token", model="qwen2.5-72b", kv_dtype="fp8")


def test_tensor_parallel_replicates_kv_heads_above_their_count_and_cp_splits_tokens():
    args = {"model": "llama-3.1-70b", "kv_dtype": "bf16", "context_tokens": 8192}
    whole = ev("kv_cache_bytes", **args)
    assert ev("kv_cache_bytes", **args, tensor_parallel=8) == whole / 8
    # 8 KV heads over 16 GPUs: each holds a replica of one head, twice the share.
    assert ev("kv_cache_bytes", **args, tensor_parallel=16) == whole / 8
    assert ev("kv_cache_bytes", **args, tensor_parallel=16, context_parallel=2) == whole / 16
    # An uneven split rounds the last rank's share up.
    odd = ev(
        "kv_cache_bytes",
        model="llama-3.1-8b",
        kv_dtype="bf16",
        context_tokens=3,
        context_parallel=2,
    )
    assert odd == 2 * ev("kv_bytes_per_token", model="llama-3.1-8b", kv_dtype="bf16")


def test_sliding_window_layers_cap_at_the_window():
    # Mistral 7B v0.1: every layer windowed at 4,096, so the cache stops growing there.
    v01 = {"model": "mistral-7b-v0.1", "kv_dtype": "bf16"}
    at_window = ev("kv_cache_bytes", **v01, context_tokens=4096)
    assert ev("kv_cache_bytes", **v01, context_tokens=32_768) == at_window
    # The same shapes without the window are the registry's v0.3.
    assert at_window == ev(
        "kv_cache_bytes", model="mistral-7b", kv_dtype="bf16", context_tokens=4096
    )
    # Gemma 3 4B: layers 6, 12, ..., 30 global (5 of 34), the other 29 windowed at 1,024.
    per_layer_token = 2 * 4 * 256 * 2
    gemma = ev("kv_cache_bytes", model="gemma-3-4b", kv_dtype="bf16", context_tokens=131_072)
    assert gemma == (5 * 131_072 + 29 * 1024) * per_layer_token
    full = ev(
        "kv_cache_bytes",
        model="gemma-3-4b",
        kv_dtype="bf16",
        context_tokens=131_072,
        sliding_window=0,
    )
    assert full == 34 * 131_072 * per_layer_token
    # A hypothetical window on a registry model: 3 of 4 layers at 4,096.
    hypo = ev(
        "kv_cache_bytes",
        model="llama-3.1-8b",
        kv_dtype="bf16",
        context_tokens=131_072,
        sliding_window=4096,
        global_every=4,
    )
    assert hypo == (8 * 131_072 + 24 * 4096) * 2 * 8 * 128 * 2


def test_kv_cache_rejects_what_it_cannot_model():
    with pytest.raises(ValueError, match="only modelled for registry models"):
        ev(
            "kv_cache_bytes",
            model="gemma-3-4b",
            kv_dtype="bf16",
            context_tokens=1,
            tensor_parallel=2,
        )
    with pytest.raises(ValueError, match="tensor_parallel 3"):
        ev(
            "kv_cache_bytes",
            model="llama-3.1-8b",
            kv_dtype="bf16",
            context_tokens=1,
            tensor_parallel=3,
        )
    with pytest.raises(KeyError, match="unknown kv_dtype"):
        ev("kv_cache_bytes", model="llama-3.1-8b", kv_dtype="int4", context_tokens=1)


def test_tokens_in_a_capacity_tier():
    per_token = ev("kv_bytes_per_token", model="llama-3.1-70b", kv_dtype="bf16")
    tokens = ev("kv_tokens_in_capacity", model="llama-3.1-70b", kv_dtype="bf16", capacity_gib=512)
    assert tokens == math.floor(512 * 2**30 / per_token) == 1_677_721
    with pytest.raises(ValueError, match="exactly one"):
        ev(
            "kv_tokens_in_capacity",
            model="llama-3.1-70b",
            kv_dtype="bf16",
            capacity_gb=1,
            capacity_gib=1,
        )


def test_transfer_time_is_bytes_over_link_rate():
    seconds = ev(
        "kv_transfer_seconds", model="llama-3.1-70b", kv_dtype="bf16", tokens=32_768, gb_per_s=50
    )
    assert seconds == pytest.approx(32_768 * 327_680 / 50e9)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "mixtral-8x7b", "qwen2.5-7b"])
def test_prefill_flops_is_the_decode_rooflines_flops_summed_over_positions(model):
    # labs.catalog.roofline.decode_step counts one token's FLOPs against a context of t tokens.
    spec, gpu = get_model(model), get_gpu("h100")
    steps = sum(
        roofline.decode_step(
            spec, gpu, weight_format="bf16", kv_dtype="bf16", tp=1, batch=1, context_tokens=t
        ).flops
        for t in range(1, 65)
    )
    # The routed share differs for MoE at batch 1 (k experts) and prefill (also k per token).
    assert ev("prefill_flops", model=model, tokens=64) == pytest.approx(steps, rel=1e-12)
    seconds = ev("prefill_seconds", model=model, tokens=64, gpu="h100")
    assert seconds == pytest.approx(steps / 989.5e12)


def test_ring_attention_chunk_balances_compute_and_transfer():
    c = ev("ring_attention_overlap_tokens", model="llama-3.1-70b", gpu="h100", link_gb_s=450)
    spec = get_model("llama-3.1-70b")
    compute = 4 * c * c * spec.q_dim / 989.5e12
    send = c * 2 * spec.kv_dim * 2 / 450e9
    assert compute == pytest.approx(send)
    assert c == pytest.approx(274.86, abs=0.01)


def test_all_to_all_bytes_per_token():
    # DeepSeek-V3: 58 MoE layers × 8 experts × 7,168 values, FP8 (+ a scale per 128) out, bf16 back.
    dsv3 = ev("moe_all_to_all_bytes_per_token", model="deepseek-v3", dispatch_dtype="fp8_block128")
    assert dsv3 == 58 * 8 * 7168 * (1 + 4 / 128 + 2)
    mixtral = ev("moe_all_to_all_bytes_per_token", model="mixtral-8x7b", expert_parallel=8)
    assert mixtral == 32 * 2 * 4096 * 4 * 7 / 8
    per_step = ev(
        "moe_all_to_all_bytes_per_token", model="mixtral-8x7b", expert_parallel=8, tokens=128
    )
    assert per_step == 128 * mixtral
    seconds = ev(
        "moe_all_to_all_seconds", model="mixtral-8x7b", tokens=128, gb_per_s=50, expert_parallel=8
    )
    assert seconds == pytest.approx(per_step / 50e9)
    with pytest.raises(ValueError, match="dense model"):
        ev("moe_all_to_all_bytes_per_token", model="llama-3.1-8b")


def test_expected_active_experts_matches_the_decode_roofline():
    spec = get_model("mixtral-8x7b")
    for batch in (1, 4, 64):
        assert ev(
            "moe_expected_active_experts", model="mixtral-8x7b", tokens=batch
        ) == pytest.approx(roofline.expected_active_experts(spec, batch))
    assert ev("moe_expected_active_experts", model="deepseek-v3", tokens=1) == pytest.approx(8)


def test_balancedness_linear_and_eplb():
    loads = [30, 10, 10, 10, 20, 10, 5, 5]  # 100 tokens, 4 GPUs: mean 25
    assert ev("moe_balancedness", loads=loads, gpus=4) == pytest.approx(25 / 40)
    # EPLB: 4 extra slots split the heaviest experts; packing then evens the GPUs out.
    eplb = ev("moe_balancedness", loads=loads, gpus=4, redundant=4, placement="eplb")
    assert eplb == pytest.approx(1.0)
    # Without spare slots the 30-token expert shares a GPU with a 5: 35 is the best packing.
    assert ev("moe_balancedness", loads=loads, gpus=4, placement="eplb") == pytest.approx(25 / 35)
    with pytest.raises(ValueError, match="do not split evenly"):
        ev("moe_balancedness", loads=loads, gpus=3)


def _llama3_config(model: str):
    from transformers import LlamaConfig

    spec = get_model(model)
    return LlamaConfig(
        hidden_size=spec.hidden_size,
        num_attention_heads=spec.num_attention_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_context,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500_000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )


def test_llama3_bands_agree_with_transformers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, _ = ROPE_INIT_FUNCTIONS["llama3"](_llama3_config("llama-3.1-8b"), "cpu")
    spec = get_model("llama-3.1-8b")
    base = 1 / (500_000.0 ** (torch.arange(0, spec.head_dim, 2).double() / spec.head_dim))
    ratio = (base / inv_freq.double()).tolist()
    bands = {
        "unchanged": sum(math.isclose(r, 1, rel_tol=1e-6) for r in ratio),
        "scaled": sum(math.isclose(r, 8, rel_tol=1e-6) for r in ratio),
    }
    bands["blended"] = len(ratio) - bands["unchanged"] - bands["scaled"]
    for band, count in bands.items():
        assert ev("llama3_rope_pairs", model="llama-3.1-8b", band=band) == count
    assert bands == {"unchanged": 29, "scaled": 29, "blended": 6}
    wavelengths = (2 * math.pi / base).tolist()
    assert ev("rope_wavelength_tokens", model="llama-3.1-8b", pair=63) == pytest.approx(
        wavelengths[63]
    )


def test_yarn_attention_factor_agrees_with_transformers():
    from transformers import Qwen2Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = Qwen2Config(
        hidden_size=3584,
        num_attention_heads=28,
        max_position_embeddings=131_072,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 4.0,
            "original_max_position_embeddings": 32_768,
        },
    )
    _, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    assert ev("yarn_attention_factor", factor=4) == pytest.approx(attention_factor)


def _hf_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    scores = torch.tensor([logits], dtype=torch.float64)
    ids = torch.zeros((1, 1), dtype=torch.long)
    scores = TemperatureLogitsWarper(temperature)(ids, scores)
    if min_p:
        scores = MinPLogitsWarper(min_p)(ids, scores)
    if top_k:
        scores = TopKLogitsWarper(top_k)(ids, scores)
    if top_p < 1:
        scores = TopPLogitsWarper(top_p)(ids, scores)
    return torch.softmax(scores, dim=-1)[0].tolist()


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": 0.5},
        {"temperature": 1.3, "top_k": 3},
        {"top_p": 0.8},
        {"temperature": 0.7, "top_k": 5, "top_p": 0.9},
        {"min_p": 0.1},
        {"temperature": 2.0, "min_p": 0.05, "top_k": 6},
    ],
)
def test_sampling_agrees_with_transformers_warpers(options):
    generator = torch.Generator().manual_seed(7)
    logits = (torch.randn(12, generator=generator, dtype=torch.float64) * 2).tolist()
    expected = _hf_probs(logits, **options)
    for index in range(len(logits)):
        got = ev("sampling_probability", logits=logits, index=index, **options)
        assert got == pytest.approx(expected[index], abs=1e-12)
    kept = ev("sampling_probability", logits=logits, what="kept", **options)
    assert kept == sum(p > 0 for p in expected)


def test_sampling_rejects_zero_temperature():
    with pytest.raises(ValueError, match="greedy"):
        ev("sampling_probability", logits=[1.0, 0.0], temperature=0)


def test_bitmask_and_lora_bytes():
    assert ev("token_bitmask_bytes", model="llama-3.1-8b") == 128_256 / 32 * 4 == 16_032
    assert ev("token_bitmask_bytes", model="qwen2.5-7b", batch=256) == 256 * 152_064 / 32 * 4
    # The qlora-budget lab counts the same adapter (its trainable_params).
    trainable = ev(
        "lab_result",
        lab="qlora-budget",
        key="trainable_params",
        params={"model": "llama-3.1-8b", "rank": 16},
    )
    assert ev("lora_adapter_bytes", model="llama-3.1-8b", rank=16) == 2 * trainable
    slots = ev("lora_adapter_bytes", model="llama-3.1-8b", rank=256, adapters=8)
    assert slots == 8 * 16 * ev("lora_adapter_bytes", model="llama-3.1-8b", rank=16)
    with pytest.raises(KeyError, match="unknown targets"):
        ev("lora_adapter_bytes", model="llama-3.1-8b", rank=8, targets=["qkv"])


def test_breakeven_link_rate_is_cache_bytes_over_prefill_time():
    args = {"model": "llama-3.1-70b", "gpu": "h100"}
    for tokens in (1, 2048, 32_768):
        seconds = ev("prefill_seconds", tokens=tokens, **args)
        cache = ev("kv_cache_bytes", model="llama-3.1-70b", kv_dtype="bf16", context_tokens=tokens)
        assert ev("kv_transfer_breakeven_gb_s", tokens=tokens, **args) == pytest.approx(
            cache / seconds / 1e9
        )
    # Attention's quadratic FLOPs make long prompts easier to ship than short ones.
    short = ev("kv_transfer_breakeven_gb_s", tokens=2048, **args)
    assert ev("kv_transfer_breakeven_gb_s", tokens=32_768, **args) < short
    # Splitting a prefill over GPUs divides its time.
    one = ev("prefill_seconds", tokens=4096, **args)
    assert ev("prefill_seconds", tokens=4096, gpus=8, **args) == pytest.approx(one / 8)
