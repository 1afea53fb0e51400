"""Shared base of the formats whose scale granularity is an option (int8, int4, fp8).

``granularity="tensor"``: one scale for the whole tensor; ``"channel"``: one per row (all
leading dims flattened; for a (out, in) weight, one per output channel); an int: one per
block of that many elements along the last dim. Scales are float32 unless a subclass
stores them narrower (``scale_field`` and ``spec`` say how they are stored).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from labs.quant.core import Format
from labs.quant.layout import Layout
from labs.quant.spec import FP32_BITS, SPECS, FormatKey, FormatSpec

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
    def spec(self) -> FormatSpec:
        return self.scaled_spec("fp32", FP32_BITS)

    def scaled_spec(self, scale_type: str, scale_bits: int, zero_point_bits: int = 0) -> FormatSpec:
        """The format's row with this ``granularity`` and scales of ``scale_bits``."""
        row = SPECS[FormatKey(self.key)]
        return row.with_granularity(self.granularity, scale_bits, scale_type, zero_point_bits)

    @property
    def scale_field(self) -> str:
        """Key of the stored scales in the fields (per block) or tensor fields (per tensor),
        named after their stored dtype."""
        return "scale_fp32"

    def scale_offset(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor], layout: Layout
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The float32 scale of every block, 1-D (expanded, not copied, per tensor), and
        ``-zero_point * scale`` as the offset when there are zero points."""
        scale = self.decode_scales(fields, tensor)
        if self.scale_scope == "tensor":
            scale = scale.expand(layout.n_blocks)
        zero_point = self.decode_zero_points(fields, tensor)
        if zero_point is None:
            return scale, None
        zero_point = zero_point.float().reshape(-1).expand(layout.n_blocks)
        return scale, -zero_point * scale

    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        import torch

        if self.scale_scope == "tensor":
            return tensor[self.scale_field].reshape(1).to(torch.float32)
        return fields[self.scale_field].to(torch.float32)
