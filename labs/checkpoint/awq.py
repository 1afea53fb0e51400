"""AutoAWQ's GEMM layout: asymmetric per-group int4 codes packed eight to an int32 word.

``qweight`` [in, out / 8] and ``qzeros`` [groups, out / 8] hold the codes and zero points
packed along the output dimension; ``scales`` [groups, out] are fp16. torch is imported
inside the functions, so importing this module imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PACKED_BITS = 32  # qweight / qzeros are int32 words of 32 / bits codes
# AutoAWQ GEMM packs eight 4-bit codes per int32 in this order of output columns
# (awq/modules/linear/gemm.py: order_map = [0, 2, 4, 6, 1, 3, 5, 7]).
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def awq_quantize(
    w: torch.Tensor, bits: int, group: int
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Asymmetric per-group quantization of ``w`` [out, in] into AutoAWQ GEMM tensors, and
    the fp32 weight those tensors decode to (what a correct loader must reproduce)."""
    import torch

    out_f, in_f = w.shape
    q_max = 2**bits - 1
    wg = w.float().reshape(out_f, in_f // group, group)
    lo = wg.amin(-1).clamp(max=0)
    hi = wg.amax(-1).clamp(min=0)
    scale = ((hi - lo) / q_max).clamp(min=torch.finfo(torch.float16).tiny)
    zero = torch.round(-lo / scale).clamp(0, q_max)
    codes = torch.clamp(torch.round(wg / scale[..., None]) + zero[..., None], 0, q_max)
    scale_fp16 = scale.to(torch.float16)
    decoded = ((codes - zero[..., None]) * scale_fp16.float()[..., None]).reshape(out_f, in_f)
    codes = codes.reshape(out_f, in_f).to(torch.int64)
    tensors = {
        "qweight": awq_pack(codes.T.contiguous(), bits),  # [in, out / pack]
        "qzeros": awq_pack(zero.T.to(torch.int64).contiguous(), bits),  # [groups, out / pack]
        "scales": scale_fp16.T.contiguous(),  # [groups, out]
    }
    return tensors, decoded


def awq_pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack ``codes`` [rows, cols] (values < 2**bits) into int32 along cols, AWQ's order."""
    import torch

    pack = PACKED_BITS // bits
    rows, cols = codes.shape
    grouped = codes.reshape(rows, cols // pack, pack)[..., list(AWQ_PACK_ORDER[:pack])]
    shifts = torch.arange(pack, dtype=torch.int64) * bits
    words = (grouped << shifts).sum(-1)
    # Reinterpret as two's complement: the top nibble sets the int32 sign bit.
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def awq_unpack(words: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`awq_pack`: int32 [rows, cols / pack] → int64 codes [rows, cols]."""
    import torch

    pack = PACKED_BITS // bits
    shifts = torch.arange(pack, dtype=torch.int64) * bits
    nibbles = (words.to(torch.int64)[..., None] >> shifts) & (2**bits - 1)
    out = torch.empty_like(nibbles)
    out[..., list(AWQ_PACK_ORDER[:pack])] = nibbles
    return out.reshape(words.shape[0], -1)


def awq_dequantize(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, bits: int
) -> torch.Tensor:
    """fp32 weight [out, in] from AWQ GEMM tensors."""
    codes = awq_unpack(qweight, bits)  # [in, out]
    zeros = awq_unpack(qzeros, bits)  # [groups, out]
    group = codes.shape[0] // scales.shape[0]
    zeros = zeros.repeat_interleave(group, dim=0)
    s = scales.float().repeat_interleave(group, dim=0)
    return ((codes - zeros).float() * s).T.contiguous()
