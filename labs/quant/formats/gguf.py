"""GGUF's legacy block formats q8_0, q4_0 and q4_1, bit-exact with llama.cpp.

Reference: llama.cpp ``ggml/src/ggml-quants.c`` ``quantize_row_q8_0_ref``,
``quantize_row_q4_0_ref`` and ``quantize_row_q4_1_ref`` (the reference quantizers used
to create model files), and the block structs of ``ggml/src/ggml-common.h``; gguf-py's
``gguf/quants.py`` ports them to numpy and is the cross-check in the tests. Block sizes
follow gguf-py ``constants.GGML_QUANT_SIZES`` (block of 32, bytes per block):

    Q8_0: (32, 2 + 32)        fp16 d, then 32 int8 codes
    Q4_0: (32, 2 + 16)        fp16 d, then 16 bytes: element j in the low nibble of
                              byte j, element j + 16 in its high nibble
    Q4_1: (32, 2 + 2 + 16)    fp16 d, fp16 m (the block minimum), then nibbles as Q4_0

Arithmetic, all in float32 as in the C code (``id = d ? 1/d : 0``; the scale is rounded
to fp16 only for storage, codes use the float32 d):

    Q8_0: d = amax / 127;      q = roundf(x * id)                (half away from zero)
    Q4_0: d = max / -8, where max is the signed value of largest magnitude (the first
          one in the block on ties);  q = min(15, (int8_t)(x * id + 8.5f))  (truncation)
    Q4_1: d = (max - min) / 15;  q = min(15, (int8_t)((x - min) * id + 0.5f))

Deliberate differences: a block whose float32 d is so small that ``1/d`` overflows
(amax below ~4e-37) gets codes of zero instead of the C code's undefined NaN-to-int
cast (its fp16 d is 0 either way, so the dequantized values are the same); a scale that
overflows fp16 (|values| above ~8.3e6 for q8_0) raises ValueError instead of storing inf.
Rows whose length is not a multiple of 32 are padded (``q.padded``), which GGUF itself
does not allow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import labs.quant.constants as C
from labs.quant.blockops import block_min_max
from labs.quant.core import Format

if TYPE_CHECKING:
    import torch

# Largest float32 below 0.5 (0x3EFFFFFF). trunc(v + copysign(this, v)) is C's roundf for
# |v| < 2**23: ties reach the next integer, while v just below k + 0.5 stays below it
# (adding exactly 0.5 would round 0.49999997 up to 1.0).
ROUND_HALF_AWAY_BIAS = 0.5 - 2.0**-25


def _inverse(d: torch.Tensor) -> torch.Tensor:
    """C's ``id = d ? 1.0f/d : 0.0f``, with an overflowing reciprocal also mapped to 0."""
    import torch

    inverse = torch.where(d == 0, 0.0, 1.0 / d)
    return torch.where(torch.isinf(inverse) & torch.isfinite(d), 0.0, inverse)


def _fp16_bytes(values: torch.Tensor) -> torch.Tensor:
    import torch

    return values.contiguous().view(torch.uint8).reshape(-1, C.FP16_BYTES)


@dataclass(frozen=True)
class GGUFFormat(Format):
    """Shared by the GGUF formats: an fp16 ``d`` per block (``scale_fp16``)."""

    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        import torch

        return fields["scale_fp16"].to(torch.float32)


@dataclass(frozen=True)
class Q8_0(GGUFFormat, key="q8_0"):
    """fp16 ``d`` then 32 int8 codes per block of 32."""

    @property
    def code_dtype(self) -> torch.dtype:
        import torch

        return torch.int8

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        import torch

        d = stats["amax"] / C.Q8_0_MAX
        return {"scale_fp16": d.to(torch.float16)}, {"inverse": _inverse(d)}

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        x0 = x_hp * params["inverse"][:, None]
        bias = torch.full((), ROUND_HALF_AWAY_BIAS, device=x0.device)
        return x0.add_(torch.copysign(bias, x0)).to(torch.int8)  # the cast truncates

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        import torch

        return codes.to(torch.float32)

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        qs = codes.view(torch.uint8)
        return torch.cat([_fp16_bytes(fields["scale_fp16"]), qs], dim=1).reshape(-1)


def _pack_halves(codes: torch.Tensor) -> torch.Tensor:
    """(n, 32) nibbles to (n, 16) bytes: element j low, element j + 16 high."""
    half = codes.shape[1] // 2
    return codes[:, :half] | (codes[:, half:] << C.NIBBLE_BITS)


@dataclass(frozen=True)
class Q4_0(GGUFFormat, key="q4_0"):
    """fp16 ``d`` then 16 bytes of nibbles (stored ``q + 8``) per block of 32."""

    def block_stats(self, x_hp: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"signed_max": _first_largest_magnitude(x_hp)}

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        import torch

        d = stats["signed_max"] / C.Q4_0_MAX_NEGATIVE
        return {"scale_fp16": d.to(torch.float16)}, {"inverse": _inverse(d)}

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        x0 = x_hp * params["inverse"][:, None]
        # Clamping before the truncating cast equals C's MIN(15, (int8_t)v) for v >= 0.
        return x0.add_(C.Q4_0_ROUNDING_BIAS).clamp_(0, C.NIBBLE_MAX).to(torch.uint8)

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        import torch

        return codes.to(torch.float32).sub_(C.Q4_0_OFFSET)

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        return torch.cat([_fp16_bytes(fields["scale_fp16"]), _pack_halves(codes)], dim=1).reshape(
            -1
        )


@dataclass(frozen=True)
class Q4_1(GGUFFormat, key="q4_1"):
    """fp16 ``d``, fp16 block minimum ``m``, then 16 bytes of nibbles per block of 32."""

    def block_stats(self, x_hp: torch.Tensor) -> dict[str, torch.Tensor]:
        lo, hi = block_min_max(x_hp)
        return {"min": lo, "max": hi}

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        import torch

        lo = stats["min"]
        d = (stats["max"] - lo) / C.Q4_1_LEVELS
        fields = {"scale_fp16": d.to(torch.float16), "min_fp16": lo.to(torch.float16)}
        return fields, {"inverse": _inverse(d), "min": lo}

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        x0 = (x_hp - params["min"][:, None]).mul_(params["inverse"][:, None])
        return x0.add_(C.Q4_1_ROUNDING_BIAS).clamp_(0, C.NIBBLE_MAX).to(torch.uint8)

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        import torch

        return codes.to(torch.float32)

    def decode_zero_points(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor | None:
        import torch

        return fields["min_fp16"].to(torch.float32)

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        header = [_fp16_bytes(fields["scale_fp16"]), _fp16_bytes(fields["min_fp16"])]
        return torch.cat([*header, _pack_halves(codes)], dim=1).reshape(-1)


def _first_largest_magnitude(x_hp: torch.Tensor) -> torch.Tensor:
    """Per block, the signed value of largest magnitude; on a tie between +a and -a the
    one that comes first, as the C loop's strict ``amax < fabsf(v)`` keeps it."""
    import torch

    lo, hi = block_min_max(x_hp)
    signed_max = torch.where(hi >= -lo, hi, lo)
    tied = (hi == -lo) & (hi != 0)
    if bool(tied.any()):
        rows = torch.nonzero(tied).reshape(-1)
        first = x_hp[rows].abs().argmax(dim=1)
        signed_max[rows] = x_hp[rows, first]
    return signed_max
