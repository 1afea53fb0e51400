"""NVFP4: E2M1 elements in blocks of 16, an E4M3 scale per block and a float32 scale per
tensor (NVIDIA Blackwell; cuBLAS "1D block scaling" with a per-tensor scale).

    tensor_scale_fp32 = amax(x) / (F8_E4M3_MAX * F4_E2M1_MAX)        (= amax / 2688)
    scale_fp8[b]      = E4M3_rne((amax_b / F4_E2M1_MAX) / tensor_scale_fp32)   (≤ 448)
    codes             = E2M1_rne(clamp(x * ((1 / tensor_scale_fp32) / scale_fp8[b]), ±6))
    value             = e2m1(code) * (tensor_scale_fp32 * scale_fp8[b])

The operation order is torchao's ``nvfp4_quantize`` with a per-tensor scale, so the codes
and scale bytes match it bit for bit, with two deliberate differences:
- an all-zero tensor gives exact zeros here; torchao computes 0/0 for the block scale
  and returns NaN;
- a block scale that rounds below E4M3's smallest subnormal (2**-9) is stored as 0 and
  its block as zeros (what rounding to E4M3 means, as Transformer Engine does); torchao
  first clamps block scales up to E4M3's smallest *normal*, 2**-6, so its scale bytes
  differ for blocks whose amax is below 2**-6/448 ≈ 3.5e-5 of the tensor's amax.
If ``1 / tensor_scale`` overflows float32 (a tensor whose amax is below ~8e-36) the
elements are divided by ``tensor_scale * scale_fp8`` instead, which stays finite.

Stored layout: two E2M1 codes per byte (element 2i in the low nibble, as PTX's e2m1x2),
then one E4M3 byte per block, then the float32 tensor scale (little-endian).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import labs.quant.constants as C
from labs.quant.blockops import nonzero_divisor
from labs.quant.core import Format
from labs.quant.layout import Layout
from labs.quant.minifloat import E2M1, E4M3, MiniFloat
from labs.quant.packing import le_bytes, pack_nibbles

if TYPE_CHECKING:
    import torch

NVFP4_TENSOR_SCALE_DIVISOR = C.F8_E4M3_MAX * C.F4_E2M1_MAX  # 2688


@dataclass(frozen=True)
class NVFP4(Format, key="nvfp4"):
    elem: ClassVar[MiniFloat] = E2M1

    def tensor_fields(
        self, x_blocks: torch.Tensor, stats: Mapping[str, torch.Tensor], layout: Layout
    ) -> dict[str, torch.Tensor]:
        amax = stats["amax"].max()  # the largest block absmax (NaN-propagating)
        tensor_scale = amax / NVFP4_TENSOR_SCALE_DIVISOR
        return {"tensor_amax": amax, "tensor_scale_fp32": tensor_scale}

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        import torch

        tensor_scale = tensor["tensor_scale_fp32"]
        block_scale = stats["amax"] / C.F4_E2M1_MAX
        # A zero tensor scale means an all-zero tensor: every block scale is then 0.
        scale_fp8 = E4M3.encode(block_scale / nonzero_divisor(tensor_scale), keep_nan=True)
        scale = E4M3.decode(scale_fp8)
        inverse_tensor_scale = 1.0 / tensor_scale
        if bool(torch.isfinite(inverse_tensor_scale)):
            multiplier = torch.where(scale == 0, 0.0, inverse_tensor_scale / scale)
        else:  # 1 / tensor_scale overflows: divide by the product instead
            total = tensor_scale * scale
            multiplier = 1.0 / torch.where(total == 0, float("inf"), total)
        return {"scale_fp8": scale_fp8}, {"multiplier": multiplier}

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        return E2M1.encode(x_hp * params["multiplier"][:, None])

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        return E2M1.decode(codes)

    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        return E4M3.decode(fields["scale_fp8"])

    def scale_offset(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor], layout: Layout
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return tensor["tensor_scale_fp32"] * self.decode_scales(fields, tensor), None

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        return torch.cat(
            [
                pack_nibbles(codes),
                fields["scale_fp8"].reshape(-1),
                le_bytes(tensor["tensor_scale_fp32"]),
            ]
        )
