"""Per-block reductions shared by the formats, written for speed on CPU and CUDA.

Block absmax is the max over the float32 bits with the sign cleared: for non-negative
floats the bit patterns order like the values, and every NaN pattern sorts above Inf, so
a NaN anywhere in a block makes its absmax NaN (the non-finite check relies on it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import labs.quant.constants as C

if TYPE_CHECKING:
    import torch


def block_absmax(x_hp: torch.Tensor) -> torch.Tensor:
    """Max of |x| along dim 1 of (n, block_len) float32 blocks, NaN-propagating."""
    import torch

    abs_bits = x_hp.view(torch.int32) & C.F32_SIGN_MASK
    return abs_bits.amax(dim=1).view(torch.float32)


def tensor_absmax(x: torch.Tensor) -> torch.Tensor:
    """Max of |x| over the whole tensor as a float32 0-d tensor, NaN-propagating."""
    import torch

    lo, hi = torch.aminmax(x)
    # abs() turns a -0.0 maximum into +0.0, so a zero scale never flips signs.
    return torch.maximum(hi.float(), -lo.float()).abs()


def nonzero_divisor(scale: torch.Tensor) -> torch.Tensor:
    """``scale`` with zeros replaced by one: a zero scale only occurs for an all-zero
    block, whose elements then stay exactly zero instead of becoming 0/0 = NaN."""
    import torch

    return torch.where(scale == 0, torch.ones_like(scale), scale)


def block_min_max(x_hp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Min and max along dim 1, NaN-propagating. Two reductions: torch.aminmax along a
    short dim is several times slower on CPU."""
    return x_hp.amin(dim=1), x_hp.amax(dim=1)
