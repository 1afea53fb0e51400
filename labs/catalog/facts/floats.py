"""Binary floating-point and integer element types: the encodings the dtype facts
(largest value, smallest normal, bits) are computed from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FloatEncoding:
    """A binary floating-point format: sign + ``exponent_bits`` + ``mantissa_bits``.

    ``specials`` says how the top exponent code is used:
    ``ieee`` — reserved for Inf/NaN (fp32, tf32, bf16, fp16, fp8_e5m2);
    ``fn`` — finite, only the all-ones mantissa is NaN (fp8_e4m3, OCP "E4M3FN");
    ``finite`` — no Inf/NaN at all (the OCP MX fp6/fp4 element types).
    """

    exponent_bits: int
    mantissa_bits: int
    specials: str
    storage_bits: int

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def max(self) -> float:
        top_exponent_code = 2**self.exponent_bits - 1
        ulp = 2.0**-self.mantissa_bits
        if self.specials == "ieee":
            return (2 - ulp) * 2.0 ** (top_exponent_code - 1 - self.bias)
        if self.specials == "fn":
            return (2 - 2 * ulp) * 2.0 ** (top_exponent_code - self.bias)
        return (2 - ulp) * 2.0 ** (top_exponent_code - self.bias)

    @property
    def min_normal(self) -> float:
        return 2.0 ** (1 - self.bias)


FLOAT_DTYPES: dict[str, FloatEncoding] = {
    "fp32": FloatEncoding(8, 23, "ieee", 32),
    # TF32 is fp32 in registers; tensor cores read 1 + 8 + 10 = 19 significant bits.
    "tf32": FloatEncoding(8, 10, "ieee", 19),
    "bf16": FloatEncoding(8, 7, "ieee", 16),
    "fp16": FloatEncoding(5, 10, "ieee", 16),
    "fp8_e4m3": FloatEncoding(4, 3, "fn", 8),
    "fp8_e5m2": FloatEncoding(5, 2, "ieee", 8),
    "fp6_e2m3": FloatEncoding(2, 3, "finite", 6),
    "fp6_e3m2": FloatEncoding(3, 2, "finite", 6),
    "fp4_e2m1": FloatEncoding(2, 1, "finite", 4),
}

# Signed two's-complement integers; "max" is the largest positive value, the
# one symmetric quantizers map amax to (int8 → 127, int4 → 7).
INT_DTYPE_BITS: dict[str, int] = {"int8": 8, "int4": 4}
