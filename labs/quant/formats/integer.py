"""int8 and int4: uniform integer grids with float32 (default) or fp16 scales.

Symmetric (default): ``scale = absmax / qmax`` with qmax = 127 (int8) or 7 (int4), codes
``round(x / scale)`` in [-qmax, qmax] (round half to even, torch.round). The grid is
symmetric so that -x is as representable as x; the extra negative code (-128 / -8) is
unused.

Asymmetric (``zero_point=True``): the range [min(x, 0), max(x, 0)] (0 always included, so
zero is exact, as in PyTorch's observers) maps onto [0, 2**bits - 1]:
``scale = hi/levels - lo/levels`` (split so that a range near float32's max does not
overflow), ``zero_point = round(-lo / scale)`` stored as an unsigned integer of the
element width, codes ``round(x / scale) + zero_point``.

Scale dtype (``scale_dtype``): "fp32" (default) stores float32 scales; "fp16" stores
them as IEEE binary16, as GPTQ and AWQ checkpoints do: each scale is rounded to fp16
(round to nearest even) *before* the codes are computed, so encoder and decoder use the
same value, and ``nbytes`` counts two bytes per scale (int4 block 128: 4 + 16/128 =
4.125 bits per value). A scale beyond fp16's largest value (65504, i.e. |values| above
65504 · qmax) raises ValueError rather than storing inf; a scale below fp16's smallest
subnormal (2**-24) becomes 0 and its block dequantizes to zeros.

Stored layout (``to_bytes``): the codes in flat row-major order (int8: one byte each,
two's complement when symmetric; int4: two per byte, element 2i in the low nibble), then
the scales (float32 or fp16, little-endian), then the zero points at the element width.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import labs.quant.constants as C
from labs.quant.blockops import block_absmax, block_min_max, nonzero_divisor, tensor_absmax
from labs.quant.formats.granular import GranularFormat
from labs.quant.layout import Layout
from labs.quant.packing import le_bytes, pack_nibbles
from labs.quant.spec import FP16_BITS, FP32_BITS, INT4_DEFAULT_GROUP, SPECS, FormatKey, FormatSpec

if TYPE_CHECKING:
    import torch

SCALE_DTYPE_BITS = {"fp32": FP32_BITS, "fp16": FP16_BITS}
SCALE_DTYPES = tuple(SCALE_DTYPE_BITS)


@dataclass(frozen=True)
class IntegerFormat(GranularFormat):
    zero_point: bool = False
    scale_dtype: str = "fp32"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.zero_point, bool):
            raise ValueError(
                f"{self.key}: zero_point must be True or False, got {self.zero_point!r}"
            )
        if self.scale_dtype not in SCALE_DTYPES:
            raise ValueError(
                f"{self.key}: scale_dtype={self.scale_dtype!r} is not one of {list(SCALE_DTYPES)}"
            )

    @property
    def spec(self) -> FormatSpec:
        zero_point_bits = self.bits if self.zero_point else 0
        return self.scaled_spec(
            self.scale_dtype, SCALE_DTYPE_BITS[self.scale_dtype], zero_point_bits
        )

    @property
    def bits(self) -> int:
        return SPECS[FormatKey(self.key)].element_bits

    @property
    def scale_field(self) -> str:
        return f"scale_{self.scale_dtype}"

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

    # --- scales -------------------------------------------------------------------------

    def _stored_scale(self, scale: torch.Tensor) -> torch.Tensor:
        """``scale`` in its stored dtype (float32, or fp16 rounded to nearest even).
        Raises ValueError when a finite scale is beyond fp16's range."""
        import torch

        if self.scale_dtype == "fp32":
            return scale
        overflow = torch.isfinite(scale) & (scale > C.F16_MAX)
        if bool(overflow.any()):
            worst = float(scale[overflow].max())
            if self.zero_point:
                limit = f"max(x, 0) − min(x, 0) ≤ {C.F16_MAX:g} · {self.levels}"
            else:
                limit = f"|x| ≤ {C.F16_MAX:g} · {self.qmax} = {C.F16_MAX * self.qmax:g}"
            raise ValueError(
                f"{self.key}: scale_dtype='fp16' cannot store the scale {worst:.6g}, beyond "
                f"fp16's largest value {C.F16_MAX:g} (each scale group needs {limit}); "
                "use scale_dtype='fp32'"
            )
        return scale.to(torch.float16)

    def _symmetric_scale(self, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The stored scale and the float32 divisor the encoder uses (its decoded value,
        1 where it is 0)."""
        stored = self._stored_scale(amax / self.qmax)
        return stored, nonzero_divisor(stored.float())

    def _affine_scale(
        self, lo: torch.Tensor, hi: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The stored scale, the float32 divisor and the zero point (float32), computed
        from the stored scale so that the codes match what the decoder will use."""
        lo = lo.clamp(max=0)
        hi = hi.clamp(min=0)
        stored = self._stored_scale((hi / self.levels - lo / self.levels).abs())  # no -0.0
        divisor = nonzero_divisor(stored.float())
        zero_point = (-lo / divisor).round_().clamp_(0, self.levels)
        return stored, divisor, zero_point

    def tensor_fields(
        self, x_blocks: torch.Tensor, stats: Mapping[str, torch.Tensor], layout: Layout
    ) -> dict[str, torch.Tensor]:
        import torch

        if self.scale_scope != "tensor":
            return {}
        if self.zero_point:
            lo, hi = torch.aminmax(x_blocks)
            lo, hi = lo.float(), hi.float()
            scale, divisor, zero_point = self._affine_scale(lo, hi)
            return {
                "tensor_amax": torch.maximum(hi, -lo).abs(),
                self.scale_field: scale,
                "zero_point": zero_point.to(torch.uint8),
                "divisor": divisor,
                "zero_point_fp32": zero_point,
            }
        amax = tensor_absmax(x_blocks)
        scale, divisor = self._symmetric_scale(amax)
        return {"tensor_amax": amax, self.scale_field: scale, "divisor": divisor}

    # --- blocks -------------------------------------------------------------------------

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
            scale, divisor, zero_point = self._affine_scale(stats["min"], stats["max"])
            fields = {self.scale_field: scale, "zero_point": zero_point.to(torch.uint8)}
            return fields, {"divisor": divisor, "zero_point_fp32": zero_point}
        scale, divisor = self._symmetric_scale(stats["amax"])
        return {self.scale_field: scale}, {"divisor": divisor}

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
        stored = tensor if self.scale_scope == "tensor" else fields
        parts = [payload, le_bytes(stored[self.scale_field].reshape(-1))]
        zero_point = self.decode_zero_points(fields, tensor)
        if zero_point is not None:
            parts.append(zero_point if self.bits == C.BITS_PER_BYTE else pack_nibbles(zero_point))
        return torch.cat(parts)


@dataclass(frozen=True)
class Int8(IntegerFormat, key="int8"):
    """8-bit integers; default one scale per row (per output channel)."""

    granularity: str | int = "channel"


@dataclass(frozen=True)
class Int4(IntegerFormat, key="int4"):
    """4-bit integers, two per byte; default one scale per 128 elements (the group size
    GPTQ, AWQ and torchao default to)."""

    granularity: str | int = INT4_DEFAULT_GROUP
