"""Shared base of the formats whose scale granularity is an option (int8, int4, fp8).

``granularity="tensor"``: one scale for the whole tensor; ``"channel"``: one per row (all
leading dims flattened; for a (out, in) weight, one per output channel); an int: one per
block of that many elements along the last dim. Scales are float32 unless a subclass
stores them narrower (``scale_field`` and ``scale_bytes`` say how they are stored).
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

    @property
    def scale_field(self) -> str:
        """Key of the stored scales in the fields (per block) or tensor fields (per tensor),
        named after their stored dtype."""
        return "scale_fp32"

    @property
    def scale_bytes(self) -> int:
        """Bytes of one stored scale."""
        return C.FP32_BYTES

    def n_scales(self, layout: Layout) -> int:
        if self.scale_scope == "tensor":
            return 1
        return layout.n_blocks  # one per row for "channel" (the row is the block)

    def block_scale(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor], layout: Layout
    ) -> torch.Tensor:
        """The float32 scale of every block, 1-D (expanded, not copied, per tensor)."""
        scales = self.decode_scales(fields, tensor)
        if self.scale_scope == "tensor":
            return scales.expand(layout.n_blocks)
        return scales

    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        import torch

        if self.scale_scope == "tensor":
            return tensor[self.scale_field].reshape(1).to(torch.float32)
        return fields[self.scale_field].to(torch.float32)

    def scale_bits_per_value(self) -> float:
        """Scale bits per element that a fixed block size implies (zero points not
        included)."""
        if self.block_size is None:
            return 0.0
        return self.scale_bytes * C.BITS_PER_BYTE / self.block_size
