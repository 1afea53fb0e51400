"""Shared base of the formats whose scale granularity is an option (int8, int4, fp8).

``granularity="tensor"``: one float32 scale for the whole tensor; ``"channel"``: one per
row (all leading dims flattened; for a (out, in) weight, one per output channel);
an int: one per block of that many elements along the last dim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from labs.quant import constants as C
from labs.quant.core import Format, Layout

if TYPE_CHECKING:
    import torch

GRANULARITIES = ("tensor", "channel")


@dataclass(frozen=True)
class GranularFormat(Format):
    granularity: str | int = "tensor"

    def __post_init__(self) -> None:
        super().__post_init__()
        g = self.granularity
        valid_int = isinstance(g, int) and not isinstance(g, bool) and g > 0
        if not valid_int and g not in GRANULARITIES:
            raise ValueError(
                f"{self.key}: granularity={g!r} is not valid; use 'tensor', 'channel' or a "
                "positive block size (int)"
            )

    @property
    def block_size(self) -> int | None:
        return self.granularity if isinstance(self.granularity, int) else None

    @property
    def scale_scope(self) -> str:
        return self.granularity if isinstance(self.granularity, str) else "block"

    def n_scales(self, layout: Layout) -> int:
        if self.scale_scope == "tensor":
            return 1
        return layout.n_blocks  # one per row for "channel" (the row is the block)

    def block_scale(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor], layout: Layout
    ) -> torch.Tensor:
        """The float32 scale of every block, 1-D (expanded, not copied, per tensor)."""
        if self.scale_scope == "tensor":
            return tensor["scale_fp32"].reshape(1).expand(layout.n_blocks)
        return fields["scale_fp32"]

    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        if self.scale_scope == "tensor":
            return tensor["scale_fp32"].reshape(1)
        return fields["scale_fp32"]

    def scale_bits_per_value(self) -> float:
        """Scale (and zero point) bits per element that a fixed block size implies."""
        if self.block_size is None:
            return 0.0
        return C.FP32_BYTES * C.BITS_PER_BYTE / self.block_size
