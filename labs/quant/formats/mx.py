"""OCP Microscaling (MX) v1.0: mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4.

Spec: OCP Microscaling Formats (MX) Specification v1.0, section 5 (a block of k = 32
elements shares one E8M0 scale X) and section 6.3 (conversion):

    X = 2 ** (floor(log2(amax)) - emax_elem)        (scale_rounding="floor", the spec)
    P_i = quantize_to_element(V_i / X)              (nearest even; normals beyond the
                                                    element's max are clamped to it)

floor(log2(amax)) is read from amax's exponent bits, not computed with a float log2.
``scale_rounding="rceil"`` is NVIDIA's rule (cuBLAS 1D block scaling, PTX
``cvt.rp.satfinite.ue8m0x2.f32``): ``X = amax / max_elem`` rounded up to a power of two,
so that no element is clamped.

Differences from torchao's emulation (``to_mx``), which this otherwise matches bit for
bit: a block whose amax is zero or float32-subnormal gets the exact scale 2**-127 here
(torchao divides by 2**-126 instead), and an infinite amax gives the NaN scale with
"floor" (torchao produces a finite scale).

Stored layout: the element codes in flat row-major order (fp8: one byte each; fp6: four
codes in three bytes, little-endian; fp4: two per byte, element 2i in the low nibble),
then one E8M0 byte per block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import labs.quant.constants as C
from labs.quant.core import Format
from labs.quant.minifloat import (
    E2M1,
    E2M3,
    E3M2,
    E4M3,
    E5M2,
    MiniFloat,
    e8m0_floor,
    e8m0_inverse_fp32,
    e8m0_rceil,
    e8m0_to_fp32,
)
from labs.quant.packing import pack_fp6, pack_nibbles

if TYPE_CHECKING:
    import torch

SCALE_ROUNDINGS = ("floor", "rceil")


@dataclass(frozen=True)
class MXFormat(Format):
    scale_rounding: str = "floor"

    elem: ClassVar[MiniFloat] = E2M1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scale_rounding not in SCALE_ROUNDINGS:
            raise ValueError(
                f"{self.key}: scale_rounding={self.scale_rounding!r} is not one of "
                f"{list(SCALE_ROUNDINGS)}"
            )

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        amax = stats["amax"]
        if self.scale_rounding == "floor":
            scale_e8m0 = e8m0_floor(amax, self.elem.emax)
        else:
            scale_e8m0 = e8m0_rceil(amax / self.elem.max_normal)
        # Multiplying by the exact power-of-two reciprocal equals dividing by the scale.
        return {"scale_e8m0": scale_e8m0}, {"inverse": e8m0_inverse_fp32(scale_e8m0)}

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        return self.elem.encode(x_hp * params["inverse"][:, None])

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        return self.elem.decode(codes)

    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        return e8m0_to_fp32(fields["scale_e8m0"])

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        if self.elem.bits == C.BITS_PER_BYTE:
            payload = codes.reshape(-1)
        elif self.elem.bits == 6:
            payload = pack_fp6(codes)
        else:
            payload = pack_nibbles(codes)
        return torch.cat([payload, fields["scale_e8m0"].reshape(-1)])


@dataclass(frozen=True)
class MXFP8E4M3(MXFormat, key="mxfp8_e4m3"):
    elem: ClassVar[MiniFloat] = E4M3


@dataclass(frozen=True)
class MXFP8E5M2(MXFormat, key="mxfp8_e5m2"):
    elem: ClassVar[MiniFloat] = E5M2


@dataclass(frozen=True)
class MXFP6E2M3(MXFormat, key="mxfp6_e2m3"):
    elem: ClassVar[MiniFloat] = E2M3


@dataclass(frozen=True)
class MXFP6E3M2(MXFormat, key="mxfp6_e3m2"):
    elem: ClassVar[MiniFloat] = E3M2


@dataclass(frozen=True)
class MXFP4(MXFormat, key="mxfp4"):
    elem: ClassVar[MiniFloat] = E2M1
