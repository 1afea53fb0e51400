"""labs.catalog.facts.lowbit: the numbers behind the i-quant, ternary, codebook, W4A8 and FP4
training cards, each checked against a source that does not share its code: gguf-py's
block sizes, hand-written byte sums, AQLM's published checkpoint sizes, the E2M1 grid."""

from __future__ import annotations

import dataclasses

import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from labs.catalog import facts
from labs.catalog.facts import lowbit as facts_lowbit
from labs.catalog.models import get_model
from labs.quant.spec import SPECS

GB = 1e9


@pytest.mark.parametrize("key", sorted(facts_lowbit.GGML_BLOCKS))
def test_every_block_layout_matches_gguf_py(key):
    block = facts_lowbit.GGML_BLOCKS[key]
    assert GGML_QUANT_SIZES[GGMLQuantizationType[key.upper()]] == (block.weights, block.nbytes)


@pytest.mark.parametrize("key", ["q4_0", "q8_0", "q4_k", "q6_k"])
def test_the_types_labs_quant_implements_agree_with_its_spec(key):
    assert facts_lowbit.ggml_bits_per_weight(key) == SPECS[key].bits_per_value


@pytest.mark.parametrize(
    ("key", "bits"),
    [
        ("iq1_s", 1.5625),
        ("iq1_m", 1.75),
        ("iq2_xxs", 2.0625),  # 8 x (4 grid bytes + 28 sign bits + 4 scale bits) + fp16 d
        ("iq2_xs", 2.3125),
        ("iq2_s", 2.5625),
        ("iq3_xxs", 3.0625),
        ("iq3_s", 3.4375),
        ("iq4_xs", 4.25),
        ("iq4_nl", 4.5),
        ("tq1_0", 1.6875),
        ("tq2_0", 2.0625),
    ],
)
def test_bits_per_weight_through_the_fact_table(key, bits):
    assert facts.evaluate("ggml_bits_per_weight", {"type": key}) == bits


def test_iq2_xxs_sub_block_spends_exactly_two_bits_per_weight():
    # One 32-weight sub-block: four 8-bit grid indices, four 7-bit sign patterns (the 8th
    # sign is the parity), one 4-bit scale = 64 bits; the fp16 d adds 16 bits per 256.
    sub_block_bits = 4 * 8 + 4 * 7 + 4
    assert sub_block_bits / 32 + 16 / 256 == facts_lowbit.ggml_bits_per_weight("iq2_xxs")


def test_pure_file_is_every_matrix_at_the_type_plus_f32_norms():
    m = get_model("llama-3.1-8b")
    h, inter, layers, vocab = m.hidden_size, m.intermediate_size, m.num_layers, m.vocab_size
    per_layer = (h * h + 2 * h * m.kv_dim + h * h + 3 * h * inter) * 66 // 256
    embed_and_head = 2 * vocab * h * 66 // 256
    norms = (2 * layers + 1) * h * 4
    expected = layers * per_layer + embed_and_head + norms
    assert facts_lowbit.gguf_tensor_bytes("llama-3.1-8b", "iq2_xxs", pure=True) == expected


def test_iq2_xxs_mix_widens_what_llama_quant_cpp_widens():
    m = get_model("llama-3.1-8b")
    h, inter, vocab = m.hidden_size, m.intermediate_size, m.vocab_size
    pure = facts_lowbit.gguf_tensor_bytes("llama-3.1-8b", "iq2_xxs", pure=True)
    mixed = facts_lowbit.gguf_tensor_bytes("llama-3.1-8b", "iq2_xxs")
    extra = (
        vocab * h * (84 - 66) // 256  # token_embd: Q2_K
        + vocab * h * (176 - 66) // 256  # output: Q5_K
        + 32 * m.kv_dim * h * (144 - 66) // 256  # attn_v: Q4_K (32 query heads on 8 KV heads)
        + 4 * h * inter * (84 - 66) // 256  # ffn_down of the first 32 / 8 layers: Q2_K
    )
    assert mixed - pure == extra


def test_the_mix_is_refused_for_a_mixture_of_experts_and_unknown_ftypes():
    with pytest.raises(ValueError, match="mixture of experts"):
        facts_lowbit.gguf_tensor_bytes("mixtral-8x7b", "iq2_xxs")
    with pytest.raises(KeyError, match="unknown ftype"):
        facts_lowbit.gguf_tensor_bytes("llama-3.1-8b", "q4_k_m")


def test_ternary_packing_is_close_to_the_information_bound():
    # TQ1_0 packs 5 trits per byte: 8 / 5 = 1.6 bits per trit against log2(3) = 1.585.
    assert 3**5 <= 256 < 3**6
    assert facts.evaluate("bits_for_levels", {"levels": 3}) == pytest.approx(1.58496, abs=1e-5)
    per_trit = (facts_lowbit.ggml_block_bytes("tq1_0") - 2) * 8 / 256
    assert per_trit == 1.625  # 48 bytes of 5 trits + 4 bytes of 4 trits, per 256


def _llama2_70b():
    # Llama 2 70B has Llama 3.1 70B's layer shapes with a 32,000-token vocabulary.
    return dataclasses.replace(get_model("llama-3.1-70b"), vocab_size=32000)


@pytest.mark.parametrize(
    ("codebooks", "index_bits", "published_gb"),
    # ISTA-DASLab model cards: Llama-2-70b-AQLM-2Bit-1x16-hf 18.8, -2x8-hf 18.2 ("Model size, Gb")
    [(1, 16, 18.8), (2, 8, 18.2)],
)
def test_aqlm_sizes_match_the_published_checkpoints(codebooks, index_bits, published_gb):
    size = facts_lowbit._codebook_bytes(_llama2_70b(), index_bits, 8, codebooks, dense_bits=16)
    assert round(size / GB, 1) == published_gb


def test_codebook_overhead_falls_with_matrix_size():
    small = facts_lowbit.codebook_bits_per_weight(16, 8, 1024, 4096)
    large = facts_lowbit.codebook_bits_per_weight(16, 8, 8192, 28672)
    assert 2 < large < small
    assert facts_lowbit.codebook_bits_per_weight(16, 8, 8192, 8192) == pytest.approx(2.12695, 1e-5)
    parts = [
        facts_lowbit.codebook_bits_per_weight(16, 8, 8192, 8192, what=part)
        for part in ("codes", "codebooks", "scales")
    ]
    assert parts[:2] == [2.0, 0.125]  # a 1 MiB fp16 codebook over 64 Mi weights
    assert sum(parts) == facts_lowbit.codebook_bits_per_weight(16, 8, 8192, 8192)


def test_grouped_bits_reproduce_the_awq_layout():
    assert facts_lowbit.grouped_bits_per_weight(4, 128, 16, 4) == 4.15625


@pytest.mark.parametrize("value", [0.1, 0.7, 1.2, 2.4, 3.3, 4.5, 5.9, -2.4])
def test_stochastic_rounding_is_unbiased_on_the_e2m1_grid(value):
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    p_up = facts_lowbit.stochastic_round_up_probability(value)
    lo = max(g for g in grid if g <= abs(value))
    hi = min(g for g in grid if g > abs(value))
    assert lo + p_up * (hi - lo) == pytest.approx(abs(value))


def test_grid_points_and_the_maximum_never_round_up():
    for value in (0.0, 1.5, 4.0, 6.0, 7.0):
        assert facts_lowbit.stochastic_round_up_probability(value) == 0.0


def test_a_tail_biting_trellis_stores_exactly_k_bits_per_weight():
    assert facts_lowbit.trellis_bits_per_weight(2) == 2.0
    # without tail-biting the first window's extra L - k bits are paid once per sequence
    assert facts_lowbit.trellis_bits_per_weight(2, tail_biting=False) == 2 + 14 / 256
    with pytest.raises(ValueError):
        facts_lowbit.trellis_bits_per_weight(17)


def test_absmean_zero_share_matches_ternarizing_gaussian_weights():
    import torch

    w = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0))
    codes = (w / w.abs().mean()).round().clamp(-1, 1)
    zero_share = (codes == 0).float().mean().item()
    assert zero_share == pytest.approx(facts_lowbit.absmean_ternary_zero_fraction(), abs=2e-3)
    error = ((codes * w.abs().mean() - w).norm() / w.norm()).item()
    assert error == pytest.approx(facts_lowbit.absmean_ternary_relative_error(), abs=2e-3)


def test_smoothing_k_leaves_attention_unchanged_in_exact_arithmetic():
    import torch

    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g) + 5
    smoothed = k - k.mean(dim=0, keepdim=True)
    assert torch.allclose(torch.softmax(q @ k.T, -1), torch.softmax(q @ smoothed.T, -1), atol=1e-5)


def test_smoothing_k_removes_the_error_a_shared_key_bias_causes():
    plain = [facts_lowbit.int8_attention_error(False, k_bias=b) for b in (0.0, 2.0, 8.0)]
    smooth = [facts_lowbit.int8_attention_error(True, k_bias=b) for b in (0.0, 2.0, 8.0)]
    assert plain[0] < plain[1] < plain[2]  # the bias eats int8 levels of every key
    assert max(smooth) - min(smooth) < 1e-4  # once subtracted, the bias is gone
    assert plain[2] > 5 * smooth[2]
