"""int8 and int4: uniform integer grids with float32 scales.

Symmetric (default): ``scale = absmax / qmax`` with qmax = 127 (int8) or 7 (int4), codes
``round(x / scale)`` in [-qmax, qmax] (round half to even, torch.round). The grid is
symmetric so that -x is as representable as x; the extra negative code (-128 / -8) is
unused.

Asymmetric (``zero_point=True``): the range [min(x, 0), max(x, 0)] (0 always included, so
zero is exact, as in PyTorch's observers) maps onto [0, 2**bits - 1]:
``scale = hi/levels - lo/levels`` (split so that a range near float32's max does not
overflow), ``zero_point = round(-lo / scale)`` stored as an unsigned integer of the
element width, codes ``round(x / scale) + zero_point``.

Stored layout (``to_bytes``): the codes in flat row-major order (int8: one byte each,
two's complement when symmetric; int4: two per byte, element 2i in the low nibble), then
the float32 scales (little-endian), then the zero points at the element width.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from labs.quant import constants as C
from labs.quant.blockops import block_absmax, block_min_max, nonzero_divisor, tensor_absmax
from labs.quant.core import Layout
from labs.quant.formats.granular import GranularFormat
from labs.quant.packing import le_bytes, pack_nibbles

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class IntegerFormat(GranularFormat):
    zero_point: bool = False

    bits: ClassVar[int] = 8
    scale_type: ClassVar[str] = "fp32"
    reference: ClassVar[str] = (
        "absmax / min-max affine quantization as in torchao quantize_affine and PyTorch "
        "observers (round half to even)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.zero_point, bool):
            raise ValueError(
                f"{self.key}: zero_point must be True or False, got {self.zero_point!r}"
            )

    @property
    def qmax(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def levels(self) -> int:
        return (1 << self.bits) - 1

    @property
    def code_dtype(self) -> torch.dtype:
        import torch

        return torch.uint8 if self.zero_point else torch.int8

    @property
    def bits_per_value(self) -> float:
        extra = self.scale_bits_per_value()
        if self.zero_point and self.block_size is not None:
            extra += self.bits / self.block_size
        return self.bits + extra

    def payload_bytes(self, layout: Layout) -> int:
        return -(-layout.stored * self.bits // C.BITS_PER_BYTE)

    def storage_bytes(self, layout: Layout) -> int:
        n_scales = self.n_scales(layout)
        zero_point_bytes = -(-n_scales * self.bits // C.BITS_PER_BYTE) if self.zero_point else 0
        return self.payload_bytes(layout) + n_scales * C.FP32_BYTES + zero_point_bytes

    def element_range(self) -> tuple[float, float]:
        if self.zero_point:
            return 0.0, float(self.levels)
        return float(-self.qmax), float(self.qmax)

    # --- scales -------------------------------------------------------------------------

    def _symmetric_scale(self, amax: torch.Tensor) -> torch.Tensor:
        return amax / self.qmax

    def _affine_scale(
        self, lo: torch.Tensor, hi: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lo = lo.clamp(max=0)
        hi = hi.clamp(min=0)
        scale = (hi / self.levels - lo / self.levels).abs()  # abs: no -0.0 scale
        zero_point = (-lo / nonzero_divisor(scale)).round_().clamp_(0, self.levels)
        return scale, zero_point

    def tensor_fields(
        self, x_blocks: torch.Tensor, stats: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        import torch

        if self.scale_scope != "tensor":
            return {}
        if self.zero_point:
            lo, hi = torch.aminmax(x_blocks)
            lo, hi = lo.float(), hi.float()
            scale, zero_point = self._affine_scale(lo, hi)
            return {
                "tensor_amax": torch.maximum(hi, -lo).abs(),
                "scale_fp32": scale,
                "zero_point": zero_point.to(torch.uint8),
                "divisor": nonzero_divisor(scale),
                "zero_point_fp32": zero_point,
            }
        amax = tensor_absmax(x_blocks)
        scale = self._symmetric_scale(amax)
        return {"tensor_amax": amax, "scale_fp32": scale, "divisor": nonzero_divisor(scale)}

    # --- blocks -------------------------------------------------------------------------

    @property
    def has_block_stats(self) -> bool:
        return self.scale_scope != "tensor"

    def block_stats(self, x_hp: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.zero_point:
            lo, hi = block_min_max(x_hp)
            return {"min": lo, "max": hi}
        return {"amax": block_absmax(x_hp)}

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        import torch

        if self.scale_scope == "tensor":
            return {}, {}
        if self.zero_point:
            scale, zero_point = self._affine_scale(stats["min"], stats["max"])
            fields = {"scale_fp32": scale, "zero_point": zero_point.to(torch.uint8)}
            return fields, {"divisor": nonzero_divisor(scale), "zero_point_fp32": zero_point}
        scale = self._symmetric_scale(stats["amax"])
        return {"scale_fp32": scale}, {"divisor": nonzero_divisor(scale)}

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        source = tensor if self.scale_scope == "tensor" else params
        per_block = self.scale_scope != "tensor"
        divisor = source["divisor"][:, None] if per_block else source["divisor"]
        q = (x_hp / divisor).round_()
        if not self.zero_point:
            return q.clamp_(-self.qmax, self.qmax).to(torch.int8)
        zero_point = source["zero_point_fp32"]
        q.add_(zero_point[:, None] if per_block else zero_point)
        return q.clamp_(0, self.levels).to(torch.uint8)

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        import torch

        return codes.to(torch.float32)

    def scale_offset(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor], layout: Layout
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        scale = self.block_scale(fields, tensor, layout)
        zero_point = self.decode_zero_points(fields, tensor)
        if zero_point is None:
            return scale, None
        zero_point = zero_point.float().reshape(-1).expand(layout.n_blocks)
        return scale, -zero_point * scale

    def decode_zero_points(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor | None:
        if not self.zero_point:
            return None
        if self.scale_scope == "tensor":
            return tensor["zero_point"].reshape(1)
        return fields["zero_point"]

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        if self.bits == C.BITS_PER_BYTE:
            payload = le_bytes(codes)
        else:
            payload = pack_nibbles(codes.view(torch.uint8))
        parts = [payload, le_bytes(self.decode_scales(fields, tensor))]
        zero_point = self.decode_zero_points(fields, tensor)
        if zero_point is not None:
            parts.append(zero_point if self.bits == C.BITS_PER_BYTE else pack_nibbles(zero_point))
        return torch.cat(parts)


@dataclass(frozen=True)
class Int8(IntegerFormat, key="int8"):
    """8-bit integers; default one scale per row (per output channel)."""

    granularity: str | int = "channel"
    bits: ClassVar[int] = 8
    element: ClassVar[str] = "int8"


@dataclass(frozen=True)
class Int4(IntegerFormat, key="int4"):
    """4-bit integers, two per byte; default one scale per 128 elements (the group size
    GPTQ, AWQ and torchao default to)."""

    granularity: str | int = 128
    bits: ClassVar[int] = 4
    element: ClassVar[str] = "int4"
