"""Small floating-point element types (E2M1, E2M3, E3M2, E4M3, E5M2) and the E8M0 scale.

Encoding is exact integer arithmetic on the float32 bit pattern (``encode_bits``), never
a float ``log2``: a float ``log2`` rounds values just below a power of two up to it,
which puts them in the wrong binade. E4M3 and E5M2 may use torch's float8 casts instead,
after the clamp, because the two agree code for code (tested) and the cast is faster. Rounding is to nearest, ties to even; magnitudes beyond the largest normal
are clamped to it *before* encoding (torch's own casts disagree there: the CPU cast to
float8_e5m2 overflows to inf, the cast to float8_e4m3fn saturates), so nothing here
depends on a cast's overflow behaviour.

The bit trick follows torchao ``prototype/custom_fp_utils.py`` (``_f32_to_floatx_unpacked``),
itself after "round to even with floating point numbers" (Hacker's Delight 2nd ed. 17-4):
- normal results: add ``2**(shift-1) - 1`` plus the lowest kept mantissa bit to the
  float32 bits, then shift; the carry moves the exponent when the mantissa rounds up.
- subnormal results: add a power of two whose ulp is the target's subnormal step, and
  let the FPU's own round-to-nearest-even do the rounding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import labs.quant.constants as C

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class MiniFloat:
    """A sign + ``ebits`` exponent + ``mbits`` mantissa element type, codes in a uint8.

    ``max_normal`` is the largest finite magnitude; ``nan_code`` is the positive NaN
    encoding where the type has one (E4M3: 0x7F, E5M2: 0x7F) and None otherwise (the MX
    sub-byte types have no NaN or Inf).
    """

    name: str
    ebits: int
    mbits: int
    bias: int
    max_normal: float
    nan_code: int | None = None
    inf_code: int | None = None
    torch_dtype: str | None = None  # a torch float8 dtype with the same encoding

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.ebits + self.mbits)

    @property
    def min_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mbits)

    @property
    def emax(self) -> int:
        """Exponent of the largest power of two below ``max_normal`` (OCP MX emax_elem)."""
        return int(self.max_normal).bit_length() - 1 if self.max_normal >= 1 else 0

    def positive_values(self) -> list[float]:
        """Every finite non-negative value, indexed by its code (codes are value-ordered)."""
        values = []
        for code in range(self.sign_bit):
            exponent_field, mantissa = code >> self.mbits, code & ((1 << self.mbits) - 1)
            if exponent_field == 0:
                value = mantissa * self.min_subnormal
            else:
                value = (1 + mantissa / (1 << self.mbits)) * 2.0 ** (exponent_field - self.bias)
            if value > self.max_normal:
                break
            values.append(value)
        return values

    def encode(self, x_fp32: torch.Tensor, keep_nan: bool = False) -> torch.Tensor:
        """Round float32 values to this type (nearest, ties to even; saturating).

        Returns uint8 codes (sign in bit ``ebits + mbits``). Signed zero keeps its sign.
        With ``keep_nan``, NaN maps to ``nan_code`` (types that have one); otherwise a NaN
        input gives an unspecified code: the quantizers carry NaN in the block scale.
        E4M3 and E5M2 use torch's float8 cast *after* the clamp (the cast rounds to
        nearest even; the tests check it against ``encode_bits`` code for code), since
        it is several times faster; the sub-byte types use ``encode_bits``.
        """
        import torch

        if self.torch_dtype is None:
            return self.encode_bits(x_fp32, keep_nan)
        clamped = x_fp32.clamp(-self.max_normal, self.max_normal)
        codes = clamped.to(getattr(torch, self.torch_dtype)).view(torch.uint8)
        if keep_nan and self.nan_code is not None:
            codes = torch.where(torch.isnan(x_fp32), self.nan_code, codes)
        return codes

    def encode_bits(self, x_fp32: torch.Tensor, keep_nan: bool = False) -> torch.Tensor:
        """``encode`` by integer arithmetic on the float32 bits (any ebits/mbits)."""
        import torch

        shift = C.F32_MANTISSA_BITS - self.mbits
        bits = x_fp32.view(torch.int32)
        abs_bits = bits & C.F32_SIGN_MASK
        abs_x = abs_bits.view(torch.float32).clamp_(max=self.max_normal)

        # Normal branch: re-bias the exponent and round the mantissa in one integer add.
        rebias = (self.bias - C.F32_EXPONENT_BIAS) << C.F32_MANTISSA_BITS
        round_half_down = (1 << (shift - 1)) - 1
        normal = (abs_bits >> shift).bitwise_and_(1)
        normal.add_(abs_bits).add_(rebias + round_half_down).bitwise_right_shift_(shift)

        # Subnormal branch: 2**(1 - bias + shift) has an ulp of exactly min_subnormal.
        subnormal = (abs_x + self._subnormal_magic).view(torch.int32)
        subnormal.sub_(self._subnormal_magic_bits)

        # Select without torch.where or a comparison (both are slow on CPU): the sign of
        # abs_bits - bits(min_normal), spread by an arithmetic shift, is all ones exactly
        # for subnormal results.
        use_subnormal = (abs_bits - self._min_normal_bits).bitwise_right_shift_(31)
        codes = subnormal.bitwise_xor_(normal).bitwise_and_(use_subnormal).bitwise_xor_(normal)
        # The float32 sign bit, moved down to bit (ebits + mbits).
        sign = (bits >> (31 - self.ebits - self.mbits)).bitwise_and_(self.sign_bit)
        codes = codes.bitwise_or_(sign).to(torch.uint8)
        if keep_nan and self.nan_code is not None:
            codes = torch.where(torch.isnan(x_fp32), self.nan_code, codes)
        return codes

    @property
    def _subnormal_magic_bits(self) -> int:
        shift = C.F32_MANTISSA_BITS - self.mbits
        return (C.F32_EXPONENT_BIAS - self.bias + shift + 1) << C.F32_MANTISSA_BITS

    @property
    def _subnormal_magic(self) -> float:
        return float(struct.unpack("<f", struct.pack("<i", self._subnormal_magic_bits))[0])

    @property
    def _min_normal_bits(self) -> int:
        return (1 - self.bias + C.F32_EXPONENT_BIAS) << C.F32_MANTISSA_BITS

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Float32 value of each uint8 code (a table lookup; NaN/Inf codes decode as such)."""
        import torch

        # The mask keeps a stray code (the encoding of a NaN input) inside the table.
        flat = codes.reshape(-1).to(torch.int32).bitwise_and_((1 << self.bits) - 1)
        return torch.index_select(decode_table(self, codes.device), 0, flat).reshape(codes.shape)


@cache
def _decode_values(fmt: MiniFloat) -> tuple[float, ...]:
    n_codes = 1 << fmt.bits
    values = [float("nan")] * n_codes
    for code in range(n_codes):
        magnitude_code = code & (fmt.sign_bit - 1)
        exponent_field, mantissa = (
            magnitude_code >> fmt.mbits,
            magnitude_code & ((1 << fmt.mbits) - 1),
        )
        if exponent_field == 0:
            value = mantissa * fmt.min_subnormal
        else:
            value = (1 + mantissa / (1 << fmt.mbits)) * 2.0 ** (exponent_field - fmt.bias)
        if fmt.inf_code is not None and magnitude_code == fmt.inf_code:
            value = float("inf")
        elif value > fmt.max_normal:
            value = float("nan")
        values[code] = -value if code & fmt.sign_bit else value
    return tuple(values)


_TABLES: dict[tuple[MiniFloat, str], torch.Tensor] = {}


def decode_table(fmt: MiniFloat, device: torch.device) -> torch.Tensor:
    """The float32 value of every code of ``fmt``, on ``device`` (cached)."""
    import torch

    key = (fmt, str(device))
    table = _TABLES.get(key)
    if table is None:
        table = torch.tensor(_decode_values(fmt), dtype=torch.float32, device=device)
        _TABLES[key] = table
    return table


E2M1 = MiniFloat("e2m1", ebits=2, mbits=1, bias=C.F4_E2M1_EXPONENT_BIAS, max_normal=C.F4_E2M1_MAX)
E2M3 = MiniFloat("e2m3", ebits=2, mbits=3, bias=C.F6_E2M3_EXPONENT_BIAS, max_normal=C.F6_E2M3_MAX)
E3M2 = MiniFloat("e3m2", ebits=3, mbits=2, bias=C.F6_E3M2_EXPONENT_BIAS, max_normal=C.F6_E3M2_MAX)
# OFP8: E4M3 has a single NaN (S.1111.111) and no Inf; E5M2 follows IEEE (Inf 0x7C, NaN 0x7F).
E4M3 = MiniFloat(
    "e4m3",
    ebits=4,
    mbits=3,
    bias=C.F8_E4M3_EXPONENT_BIAS,
    max_normal=C.F8_E4M3_MAX,
    nan_code=0x7F,
    torch_dtype="float8_e4m3fn",
)
E5M2 = MiniFloat(
    "e5m2",
    ebits=5,
    mbits=2,
    bias=C.F8_E5M2_EXPONENT_BIAS,
    max_normal=C.F8_E5M2_MAX,
    nan_code=0x7F,
    inf_code=0x7C,
    torch_dtype="float8_e5m2",
)


# --- Powers of two and the E8M0 scale --------------------------------------------------------


def exp2_int(exponent: torch.Tensor) -> torch.Tensor:
    """Exactly ``2.0 ** exponent`` as float32, for int32 exponents in [-149, 127].

    Built from bits (subnormal results included), because ``torch.exp2`` is a libm
    approximation on some backends.
    """
    import torch

    normal_bits = (
        (exponent + C.F32_EXPONENT_BIAS).clamp_(min=0).bitwise_left_shift_(C.F32_MANTISSA_BITS)
    )
    subnormal_shift = (exponent - C.F32_MIN_SUBNORMAL_EXPONENT).clamp_(
        min=0, max=C.F32_MANTISSA_BITS - 1
    )
    subnormal_bits = torch.ones_like(exponent).bitwise_left_shift_(subnormal_shift)
    bits = torch.where(exponent >= C.F32_MIN_NORMAL_EXPONENT, normal_bits, subnormal_bits)
    return bits.view(torch.float32)


def biased_exponent(x_fp32: torch.Tensor) -> torch.Tensor:
    """The 8-bit biased exponent field of non-negative float32 values, as int32."""
    import torch

    return x_fp32.view(torch.int32).bitwise_right_shift(C.F32_MANTISSA_BITS) & C.F32_EXPONENT_MASK


def e8m0_floor(amax: torch.Tensor, emax_elem: int) -> torch.Tensor:
    """OCP MX v1.0 section 6.3: ``2**(floor(log2(amax)) - emax_elem)`` as an E8M0 code.

    floor(log2(amax)) is the unbiased exponent field of amax, read from its bits. Zero and
    float32-subnormal amax give the smallest scale, 2**-127 (code 0), so an all-zero block
    quantizes to zeros. NaN or Inf amax give the NaN scale (0xFF).
    """
    import torch

    field = biased_exponent(amax)
    # field - 127 is floor(log2(amax)); plus the E8M0 bias of 127 it cancels.
    code = (field - emax_elem).clamp_(min=0, max=C.E8M0_MAX_FINITE)
    # NaN/Inf have the all-ones field: (field + 1) >> 8 is 1 exactly for them.
    special = (field + 1).bitwise_right_shift_(C.F32_EXPONENT_BITS)
    return code.bitwise_or_(special * C.E8M0_NAN).to(torch.uint8)


def e8m0_rceil(descale: torch.Tensor) -> torch.Tensor:
    """NVIDIA's rule (cuBLAS "1D block scaling", PTX ``cvt.rp.satfinite.ue8m0x2.f32``):
    ``descale = amax / max_elem`` rounded *up* to a power of two, saturating at 2**127.

    Exact from the bits: a normal descale with any mantissa bit set moves up one binade.
    """
    import torch

    bits = descale.view(torch.int32)
    field = bits.bitwise_right_shift(C.F32_MANTISSA_BITS) & C.F32_EXPONENT_MASK
    has_fraction = (bits & C.F32_MANTISSA_MASK) != 0
    normal_code = (field + has_fraction).clamp_(max=C.E8M0_MAX_FINITE)
    # Subnormal descale: ceil(log2) is -126 (code 1) above 2**-127, else clamps to code 0.
    two_pow_minus_127_bits = 1 << (C.F32_MANTISSA_BITS - 1)
    subnormal_code = (bits > two_pow_minus_127_bits).to(torch.int32)
    code = torch.where(field == 0, subnormal_code, normal_code)
    # satfinite: Inf saturates to 2**127 (code 254 above); only NaN becomes the NaN scale.
    is_nan = (field == C.F32_EXPONENT_MASK) & has_fraction
    return torch.where(is_nan, C.E8M0_NAN, code).to(torch.uint8)


def e8m0_to_fp32(code: torch.Tensor) -> torch.Tensor:
    """Decode E8M0: ``2**(code - 127)``, with 0xFF as NaN."""
    import torch

    exponent = code.to(torch.int32) - C.E8M0_EXPONENT_BIAS
    value = exp2_int(exponent)
    return torch.where(code == C.E8M0_NAN, float("nan"), value)


def e8m0_inverse_fp32(code: torch.Tensor) -> torch.Tensor:
    """``2**(127 - code)``: the exact reciprocal of the decoded scale (NaN for 0xFF)."""
    import torch

    exponent = C.E8M0_EXPONENT_BIAS - code.to(torch.int32)
    if bool((code >= C.E8M0_MAX_FINITE).any()):  # 2**-127 is subnormal; 0xFF is NaN
        return torch.where(code == C.E8M0_NAN, float("nan"), exp2_int(exponent))
    # Every other reciprocal is a normal float32: its bits are the biased exponent alone.
    return (
        exponent.add_(C.F32_EXPONENT_BIAS)
        .bitwise_left_shift_(C.F32_MANTISSA_BITS)
        .view(torch.float32)
    )
