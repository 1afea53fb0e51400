"""Fact functions for the quantization-breadth cards (issue 23, "Breadth: Quantization"):
llama.cpp's i-quants and ternary types, codebook (vector) quantization, W4A8 group
layouts, ternary packing and stochastic rounding.

The GGML block layouts are written as the byte arithmetic of their structs in
ggml/src/ggml-common.h (``block_iq2_xxs``: an fp16 ``d`` and ``uint16_t qs[QK_K/8]``), in
the spirit of gguf-py's ``GGML_QUANT_SIZES``, against which a test compares every row.
Which tensors ``llama-quantize`` widens in a low-bit mix follows ``llama_tensor_get_type``
in src/llama-quant.cpp. Pure Python: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from labs.catalog.models import ModelConfig, get_model, tensor_groups
from labs.quant.minifloat import E2M1

BITS_PER_BYTE = 8
QK_K = 256  # the k-quant and i-quant super-block: 256 weights along a row
QK4_NL = 32  # IQ4_NL keeps Q4_0's block of 32
FP16 = 2  # bytes of a ggml_half (the super-block scale d, or dmin)
F32 = 4  # norms stay F32 in a GGUF file


@dataclass(frozen=True)
class GgmlBlock:
    """One GGML block type: ``weights`` per block stored in ``nbytes`` bytes."""

    key: str
    weights: int
    nbytes: int
    layout: str  # the struct's fields, as ggml-common.h declares them

    @property
    def bits_per_weight(self) -> float:
        return self.nbytes * BITS_PER_BYTE / self.weights


# Each row: the struct's fields in declaration order, sizes as ggml-common.h writes them.
GGML_BLOCKS: dict[str, GgmlBlock] = {
    b.key: b
    for b in (
        GgmlBlock("q4_0", 32, FP16 + 32 // 2, "d; qs[QK4_0/2]"),
        GgmlBlock("q8_0", 32, FP16 + 32, "d; qs[QK8_0]"),
        GgmlBlock("q2_k", QK_K, QK_K // 16 + QK_K // 4 + 2 * FP16, "scales[QK_K/16]; qs[QK_K/4]; d; dmin"),
        GgmlBlock("q3_k", QK_K, QK_K // 8 + QK_K // 4 + 12 + FP16, "hmask[QK_K/8]; qs[QK_K/4]; scales[12]; d"),
        GgmlBlock("q4_k", QK_K, 2 * FP16 + 12 + QK_K // 2, "d; dmin; scales[K_SCALE_SIZE=12]; qs[QK_K/2]"),
        GgmlBlock("q5_k", QK_K, 2 * FP16 + 12 + QK_K // 8 + QK_K // 2, "d; dmin; scales[12]; qh[QK_K/8]; qs[QK_K/2]"),
        GgmlBlock("q6_k", QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + FP16, "ql[QK_K/2]; qh[QK_K/4]; scales[QK_K/16]; d"),
        # i-quants: grid indices into lattice codebooks, sign bits, small scales
        GgmlBlock("iq1_s", QK_K, FP16 + QK_K // 8 + 2 * (QK_K // 32), "d; qs[QK_K/8]; uint16 qh[QK_K/32]"),
        GgmlBlock("iq1_m", QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32, "qs[QK_K/8]; qh[QK_K/16]; scales[QK_K/32]"),
        GgmlBlock("iq2_xxs", QK_K, FP16 + 2 * (QK_K // 8), "d; uint16 qs[QK_K/8]"),
        GgmlBlock("iq2_xs", QK_K, FP16 + 2 * (QK_K // 8) + QK_K // 32, "d; uint16 qs[QK_K/8]; scales[QK_K/32]"),
        GgmlBlock("iq2_s", QK_K, FP16 + QK_K // 4 + QK_K // 32 + QK_K // 32, "d; qs[QK_K/4]; qh[QK_K/32]; scales[QK_K/32]"),
        GgmlBlock("iq3_xxs", QK_K, FP16 + 3 * QK_K // 8, "d; qs[3*QK_K/8]"),
        GgmlBlock("iq3_s", QK_K, FP16 + QK_K // 4 + QK_K // 32 + QK_K // 8 + QK_K // 64, "d; qs[QK_K/4]; qh[QK_K/32]; signs[QK_K/8]; scales[IQ3S_N_SCALE=QK_K/64]"),
        GgmlBlock("iq4_nl", QK4_NL, FP16 + QK4_NL // 2, "d; qs[QK4_NL/2]"),
        GgmlBlock("iq4_xs", QK_K, FP16 + 2 + QK_K // 64 + QK_K // 2, "d; uint16 scales_h; scales_l[QK_K/64]; qs[QK_K/2]"),
        # ternary: 5 trits per byte (3^5 = 243 <= 256) and 4 per byte, or 2 bits per trit
        GgmlBlock("tq1_0", QK_K, (QK_K - 4 * QK_K // 64) // 5 + QK_K // 64 + FP16, "qs[(QK_K - 4*QK_K/64)/5]; qh[QK_K/64]; d"),
        GgmlBlock("tq2_0", QK_K, QK_K // 4 + FP16, "qs[QK_K/4]; d"),
    )
}  # fmt: skip


def _block(type: str) -> GgmlBlock:
    try:
        return GGML_BLOCKS[type]
    except KeyError:
        raise KeyError(f"unknown GGML type {type!r}; known: {', '.join(GGML_BLOCKS)}") from None


def ggml_bits_per_weight(type: str) -> float:
    """Stored bits per weight of a GGML block type, every scale included
    (iq2_xxs → 66 bytes per 256 weights = 2.0625; tq1_0 → 54 bytes = 1.6875)."""
    return _block(type).bits_per_weight


def ggml_block_bytes(type: str) -> int:
    """Bytes of one block of a GGML type (iq2_xxs → 66, iq4_nl → 18)."""
    return _block(type).nbytes


# llama-quantize's low-bit mixes (llama_tensor_get_type): the tensors it widens.
_IQ_LOW = ("iq2_xxs", "iq2_xs", "iq1_s", "iq1_m")
FTYPES = (*_IQ_LOW, "tq1_0", "tq2_0")


def _mix(model: ModelConfig, ftype: str) -> dict[str, str]:
    """Type per tensor kind for a dense model; ``mlp_down_first`` is the first eighth of
    the layers' ffn_down, which the IQ1/IQ2 mixes widen to Q2_K."""
    if ftype in ("tq1_0", "tq2_0"):
        return {"embedding": "q4_k", "lm_head": "q6_k"}
    gqa = model.num_attention_heads // model.num_kv_heads
    mix = {
        "embedding": "q2_k",
        "lm_head": "q5_k",
        "attn_v": "q4_k" if gqa >= 4 else "q2_k",
        "mlp_down_first": "q2_k",
    }
    if ftype in ("iq1_s", "iq1_m"):
        mix["attn_o"] = "iq2_xxs"
    return mix


def _matrix_bytes(rows: int, cols: int, type: str) -> int:
    block = _block(type)
    if cols % block.weights:
        raise ValueError(
            f"rows of {cols} weights do not split into {type} blocks of {block.weights}"
        )
    return rows * cols // block.weights * block.nbytes


def gguf_tensor_bytes(model: str, ftype: str, pure: bool = False) -> int:
    """Bytes of tensor data in a GGUF file that ``llama-quantize`` writes for ``ftype``
    (``iq2_xxs``, ``iq2_xs``, ``iq1_s``, ``iq1_m``, ``tq1_0``, ``tq2_0``) from a dense
    registry model: norms F32, and the tensors llama-quant.cpp widens (output Q5_K, token
    embedding Q2_K, attn_v Q4_K when 4+ query heads share a KV head, the first eighth of
    ffn_down Q2_K for the IQ types; embedding Q4_K and output Q6_K for the TQ types).
    ``pure=True`` (``llama-quantize --pure``): every matrix in ``ftype``. Metadata and
    alignment padding are not counted."""
    m = get_model(model)
    if m.is_moe:
        raise ValueError(f"{model} is a mixture of experts: its llama-quantize mix is not modelled")
    if ftype not in FTYPES:
        raise KeyError(f"unknown ftype {ftype!r}; known: {', '.join(FTYPES)}")
    mix = {} if pure else _mix(m, ftype)
    total = 0
    for g in tensor_groups(m):
        if g.kind == "norm" or g.kind.endswith("_bias"):
            total += g.params * F32
            continue
        type = mix.get(g.kind, ftype)
        if g.kind == "mlp_down" and "mlp_down_first" in mix:
            first = m.num_layers // 8  # i_ffn_down < n_ffn_down/8
            total += first * _matrix_bytes(g.rows, g.cols, mix["mlp_down_first"])
            total += (g.count - first) * _matrix_bytes(g.rows, g.cols, type)
            continue
        total += g.count * _matrix_bytes(g.rows, g.cols, type)
    return total


def codebook_bits_per_weight(
    index_bits: int,
    vector_dim: int,
    rows: int,
    cols: int,
    num_codebooks: int = 1,
    codebook_entry_bits: int = 16,
    scale_bits: int = 16,
    what: str = "total",
) -> float:
    """Stored bits per weight of a ``rows × cols`` matrix under additive vector quantization
    (AQLM's ``num_codebooks`` × ``index_bits`` codes per group of ``vector_dim`` inputs):
    the codes, the matrix's own codebooks (2^index_bits entries of ``vector_dim`` values at
    ``codebook_entry_bits``) and one scale per output row. AQLM 1x16, groups of 8, on an
    8192 × 8192 matrix → 2 + 0.125 + 0.002 = 2.127. ``what``: ``codes``, ``codebooks``,
    ``scales`` for one part, ``total`` for their sum."""
    if cols % vector_dim:
        raise ValueError(f"{cols} input columns do not split into groups of {vector_dim}")
    weights = rows * cols
    codes = weights // vector_dim * num_codebooks * index_bits
    codebooks = num_codebooks * 2**index_bits * vector_dim * codebook_entry_bits
    parts = {"codes": codes, "codebooks": codebooks, "scales": rows * scale_bits}
    if what == "total":
        return sum(parts.values()) / weights
    if what not in parts:
        raise KeyError(f"unknown part {what!r}; known: total, {', '.join(parts)}")
    return parts[what] / weights


def codebook_weight_bytes(
    model: str, index_bits: int, vector_dim: int, num_codebooks: int = 1, dense_bits: int = 16
) -> float:
    """Bytes of a registry model whose projection matrices are codebook-quantized (each with
    its own codebooks and per-row scales, as AQLM stores them) and whose embedding, lm_head
    and norms stay at ``dense_bits``."""
    return _codebook_bytes(get_model(model), index_bits, vector_dim, num_codebooks, dense_bits)


def _codebook_bytes(
    m: ModelConfig, index_bits: int, vector_dim: int, num_codebooks: int, dense_bits: int
) -> float:
    total_bits = 0.0
    for g in tensor_groups(m):
        if g.linear:
            bpw = codebook_bits_per_weight(index_bits, vector_dim, g.rows, g.cols, num_codebooks)
            total_bits += g.params * bpw
        else:
            total_bits += g.params * dense_bits
    return total_bits / BITS_PER_BYTE


def trellis_bits_per_weight(
    bits: int, state_bits: int = 16, sequence: int = 256, tail_biting: bool = True
) -> float:
    """Stored bits per weight of a bitshift trellis code (QTIP): each weight's code is the
    ``state_bits``-bit window of a bitstream that advances ``bits`` bits per weight, so a
    sequence of ``sequence`` weights needs ``state_bits + (sequence - 1) * bits`` bits, or
    ``sequence * bits`` when the trellis is tail-biting (its last state wraps onto its
    first). k = 2, L = 16, T = 256: 2.0547 plain, 2 tail-biting."""
    if not 0 < bits <= state_bits:
        raise ValueError(f"a trellis advances 1..{state_bits} bits per weight, not {bits}")
    stream = sequence * bits if tail_biting else state_bits + (sequence - 1) * bits
    return stream / sequence


def absmean_ternary_zero_fraction() -> float:
    """Share of zeros when BitNet b1.58's absmean rule (round(w / mean|w|), clipped to
    [-1, 1]) ternarizes Gaussian weights: |w| < mean|w| / 2 = sigma * sqrt(2/pi) / 2, so
    erf(sqrt(1/pi) / 2) ≈ 0.310."""
    return math.erf(math.sqrt(2 / math.pi) / 2 / math.sqrt(2))


def absmean_ternary_relative_error(steps: int = 20_000) -> float:
    """Relative Frobenius error ||γ·q − w|| / ||w|| of absmean ternarization of Gaussian
    weights (σ = 1, γ = sqrt(2/π)), by midpoint integration of E[(|w| − γ·[|w| ≥ γ/2])²]
    over |w| in [0, 12]: ≈ 0.513."""
    gamma = math.sqrt(2 / math.pi)
    width = 12 / steps
    mse = 0.0
    for i in range(steps):
        x = (i + 0.5) * width
        density = 2 * math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # of |w|
        decoded = gamma if x >= gamma / 2 else 0.0
        mse += (x - decoded) ** 2 * density * width
    return math.sqrt(mse)


def bits_for_levels(levels: int) -> float:
    """Information content of one value that takes ``levels`` equally likely values:
    log2(3) = 1.585 bits for a ternary weight."""
    return math.log2(levels)


def grouped_bits_per_weight(
    element_bits: int,
    group_size: int,
    scale_bits: int,
    zero_point_bits: int = 0,
    channel_scale_bits: int = 0,
    cols: int = 0,
) -> float:
    """Bits per weight of group-wise integer weights: codes, one scale (and zero point) per
    ``group_size`` weights and, for two-level schemes such as QServe's, one
    ``channel_scale_bits`` scale per row of ``cols`` weights (4-bit, g128, int8 scale and
    4-bit zero, fp16 channel scale on 4096 columns → 4.0977)."""
    per_group = (scale_bits + zero_point_bits) / group_size
    per_row = channel_scale_bits / cols if channel_scale_bits else 0.0
    return element_bits + per_group + per_row


def stochastic_round_up_probability(value: float, dtype: str = "fp4_e2m1") -> float:
    """Probability that stochastic rounding sends ``value`` to the grid point above it
    (its distance from the point below ÷ the gap): E2M1, 2.4 → 0.4, so 2.4 is kept on
    average. Exact grid values and values beyond the largest magnitude give 0."""
    if dtype != "fp4_e2m1":
        raise KeyError(f"stochastic rounding is modelled for fp4_e2m1 only, not {dtype!r}")
    grid = list(E2M1.positive_values())
    magnitude = abs(value)
    for lo, hi in zip(grid, grid[1:], strict=False):
        if lo <= magnitude < hi:
            return (magnitude - lo) / (hi - lo)
    return 0.0


INT8_MAX = 127


def int8_attention_error(
    smooth_k: bool,
    tokens: int = 256,
    head_dim: int = 64,
    k_bias: float = 8.0,
    seed: int = 0,
) -> float:
    """Relative L2 error of softmax(Q Kᵀ/√d) V when Q and K are rounded to int8 with one
    absmax scale per token, as SageAttention's INT8 QKᵀ does, against the fp32 result.
    K gets a bias shared by every token (``k_bias`` × a random vector per channel), the
    pattern real keys show; ``smooth_k`` subtracts K's mean over tokens first, which leaves
    the softmax unchanged (it adds one constant per query row) and shrinks K's range."""
    import torch

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(tokens, head_dim, generator=g)
    k = torch.randn(tokens, head_dim, generator=g) + k_bias * torch.randn(head_dim, generator=g)
    v = torch.randn(tokens, head_dim, generator=g)
    scale = head_dim**-0.5
    reference = torch.softmax(q @ k.T * scale, dim=-1) @ v
    if smooth_k:
        k = k - k.mean(dim=0, keepdim=True)

    def per_token_int8(x: torch.Tensor) -> torch.Tensor:
        step = x.abs().amax(dim=-1, keepdim=True) / INT8_MAX
        return (x / step).round().clamp(-INT8_MAX, INT8_MAX) * step

    out = torch.softmax(per_token_int8(q) @ per_token_int8(k).T * scale, dim=-1) @ v
    return float((out - reference).norm() / reference.norm())


LOWBIT_FACTS: dict[str, Callable[..., float | int]] = {
    "ggml_bits_per_weight": ggml_bits_per_weight,
    "ggml_block_bytes": ggml_block_bytes,
    "gguf_tensor_bytes": gguf_tensor_bytes,
    "codebook_bits_per_weight": codebook_bits_per_weight,
    "codebook_weight_bytes": codebook_weight_bytes,
    "trellis_bits_per_weight": trellis_bits_per_weight,
    "bits_for_levels": bits_for_levels,
    "absmean_ternary_zero_fraction": absmean_ternary_zero_fraction,
    "absmean_ternary_relative_error": absmean_ternary_relative_error,
    "grouped_bits_per_weight": grouped_bits_per_weight,
    "stochastic_round_up_probability": stochastic_round_up_probability,
    "int8_attention_error": int8_attention_error,
}
