"""fp8_e4m3 and fp8_e5m2 with a float32 scale per tensor, row or block.

``scale = amax / F8_MAX`` (448 for E4M3, 57344 for E5M2), elements ``x / scale`` clamped
to ±F8_MAX and then rounded to nearest even (OFP8 rev 1.0; the scaling recipe of
Transformer Engine's "current scaling" and torchao's float8 rowwise/tensorwise).
The clamp comes before the encoding: torch's CPU cast to float8_e5m2 overflows to inf
while the cast to float8_e4m3fn saturates, and neither is relied on.

Stored layout: one byte per element (the OFP8 bit pattern) then the float32 scales.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from labs.quant.blockops import nonzero_divisor, tensor_absmax
from labs.quant.formats.granular import GranularFormat
from labs.quant.layout import Layout
from labs.quant.minifloat import E4M3, E5M2, MiniFloat
from labs.quant.packing import le_bytes

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Float8Format(GranularFormat):
    elem: ClassVar[MiniFloat] = E4M3

    def tensor_fields(
        self, x_blocks: torch.Tensor, stats: Mapping[str, torch.Tensor], layout: Layout
    ) -> dict[str, torch.Tensor]:
        if self.scale_scope != "tensor":
            return {}
        amax = tensor_absmax(x_blocks)
        scale = amax / self.elem.max_normal
        return {"tensor_amax": amax, "scale_fp32": scale, "divisor": nonzero_divisor(scale)}

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        if self.scale_scope == "tensor":
            return {}, {}
        scale = stats["amax"] / self.elem.max_normal
        return {"scale_fp32": scale}, {"divisor": nonzero_divisor(scale)}

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        if self.scale_scope == "tensor":
            return self.elem.encode(x_hp / tensor["divisor"])
        return self.elem.encode(x_hp / params["divisor"][:, None])

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        return self.elem.decode(codes)

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        return torch.cat([le_bytes(codes), le_bytes(self.decode_scales(fields, tensor))])


@dataclass(frozen=True)
class Fp8E4M3(Float8Format, key="fp8_e4m3"):
    """E4M3 ("fn": no Inf, one NaN, max 448); default one scale per tensor."""

    elem: ClassVar[MiniFloat] = E4M3


@dataclass(frozen=True)
class Fp8E5M2(Float8Format, key="fp8_e5m2"):
    """E5M2 (IEEE-like, max 57344); default one scale per tensor."""

    elem: ClassVar[MiniFloat] = E5M2
