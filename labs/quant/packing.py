"""Bit packing for ``to_bytes``: nibbles, 6-bit groups and little-endian scalars.

All helpers take and return flat uint8 tensors on the input's device; the byte order of
multi-byte scalars is little-endian (GGUF's and every CUDA/x86 host's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import labs.quant.constants as C

if TYPE_CHECKING:
    import torch

FP6_VALUES_PER_GROUP = 4  # four 6-bit values fill three bytes
FP6_BYTES_PER_GROUP = 3
FP6_BITS = 6


def _pad_to_multiple(codes: torch.Tensor, multiple: int) -> torch.Tensor:
    import torch

    flat = codes.reshape(-1)
    missing = -flat.numel() % multiple
    if missing:
        flat = torch.cat([flat, flat.new_zeros(missing)])
    return flat


def pack_nibbles(codes: torch.Tensor, high_first: bool = False) -> torch.Tensor:
    """Two 4-bit codes per byte, in flat order.

    ``high_first=False``: element 2i in the low nibble, 2i+1 in the high nibble (OCP MX
    and NVFP4 as torchao and the PTX ``e2m1x2`` type store them). ``high_first=True``:
    element 2i in the high nibble (bitsandbytes' NF4 layout). An odd count is completed
    with a zero nibble.
    """
    import torch

    flat = (_pad_to_multiple(codes, 2).to(torch.uint8) & C.NIBBLE_MASK).reshape(-1, 2)
    first, second = flat[:, 0], flat[:, 1]
    if high_first:
        return (first << C.NIBBLE_BITS) | second
    return first | (second << C.NIBBLE_BITS)


def pack_fp6(codes: torch.Tensor) -> torch.Tensor:
    """Four 6-bit codes in three bytes: value i of a group occupies bits 6i..6i+5 of the
    group's 24-bit little-endian word (the count is completed with zeros to a multiple
    of four)."""
    import torch

    groups = _pad_to_multiple(codes, FP6_VALUES_PER_GROUP).to(torch.int32).reshape(-1, 4)
    word = (
        groups[:, 0]
        | (groups[:, 1] << FP6_BITS)
        | (groups[:, 2] << (2 * FP6_BITS))
        | (groups[:, 3] << (3 * FP6_BITS))
    )
    byte_shifts = torch.tensor([0, 8, 16], dtype=torch.int32, device=codes.device)
    return ((word[:, None] >> byte_shifts) & 0xFF).to(torch.uint8).reshape(-1)


def le_bytes(values: torch.Tensor) -> torch.Tensor:
    """The little-endian bytes of a tensor's elements, flat uint8."""
    import torch

    return values.contiguous().reshape(-1).view(torch.uint8)
