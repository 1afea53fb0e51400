"""scale-derivation's parameters and result (no torch): the scale of a quantized
tensor, step by step.

The learner types a few numbers. The lab derives the scale the way the format
does — ``amax``, the largest element value ``qmax``, ``scale = amax / qmax``
(NVFP4: a float32 tensor scale and E4M3 block scales; MXFP4: a power-of-two
scale per block of 32) — then each value's ``x / scale``, its rounded element,
the dequantized value, its error, and whether it was clipped. Optionally the
scale comes from a percentile of |x| or is typed in, which clips the largest
values; the error is then split into rounding and clipping error.

Three edge cases that break real quantizers are run every time:
- the all-zero tensor: ``amax / qmax = 0`` and ``0 / 0`` is NaN; guarded
  quantizers give exact zeros instead;
- FP8 overflow: casting a value beyond the format's range with torch gives
  inf for float8_e5m2 (what float8_e4m3fn gives is shown as observed); clamping
  *before* the cast gives the largest finite value;
- the rounding vs clipping split of the error.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, FiniteFloat, model_validator

from labs.base import LabParams, LabResult
from labs.quant.metrics import ErrorSummary
from labs.quant.spec import FormatKey

FormatChoice = Literal[
    FormatKey.INT8,
    FormatKey.INT4,
    FormatKey.FP8_E4M3,
    FormatKey.FP8_E5M2,
    FormatKey.NVFP4,
    FormatKey.MXFP4,
]
# Formats with one float32 scale per tensor, whose scale the learner may set.
PER_TENSOR_FORMATS = (FormatKey.INT8, FormatKey.INT4, FormatKey.FP8_E4M3, FormatKey.FP8_E5M2)
INTEGER_FORMATS = (FormatKey.INT8, FormatKey.INT4)
FP8_DTYPES = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}

# Fifteen ordinary values and one outlier: the outlier alone sets the scale.
DEFAULT_VALUES = (
    0.12, -0.53, 0.31, 0.9, -1.24, 0.05, 0.71, -0.26,
    7.5, 0.44, -0.83, 0.17, 0.62, -0.04, 1.1, -0.35,
)  # fmt: skip
MAX_VALUES = 4096
MIN_PERCENTILE = 50.0
MAX_PERCENTILE = 100.0
MAX_SCALE = 1e30
FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max; larger becomes inf
FLOAT32_MIN_NORMAL = 2.0**-126  # a smaller scale loses precision, and below 2**-149 is 0
# The result and the per-element table show at most this many values and blocks.
SHOWN_ELEMENTS = 64
SHOWN_BLOCKS = 32
PERCENT = 100.0
# Where float8 overflow is probed, as multiples of the format's largest finite value.
CAST_PROBE_MULTIPLES = (0.5, 1.05, 1.2, 4.0, -4.0)
# A quotient that overflows float32 on its way to the cast: 1e30 / 1e-30.
OVERFLOW_NUMERATOR = 1e30
OVERFLOW_DENOMINATOR = 1e-30


class Params(LabParams):
    values: list[Annotated[FiniteFloat, Field(ge=-FLOAT32_MAX, le=FLOAT32_MAX)]] = Field(
        default=list(DEFAULT_VALUES),
        min_length=1,
        max_length=MAX_VALUES,
        description=f"The tensor: 1 to {MAX_VALUES} finite float32 numbers, e.g. [0.1, -2.5, 3.0]. "
        "The default has one outlier (7.5) among values below 1.3",
    )
    format: FormatChoice = Field(
        default=FormatKey.INT8,
        description="int8 or int4 (symmetric, one float32 scale), fp8_e4m3 or fp8_e5m2 (one "
        "float32 scale), nvfp4 (float32 tensor scale and E4M3 scale per 16) or mxfp4 "
        "(power-of-two E8M0 scale per 32)",
    )
    clip_percentile: float | None = Field(
        default=None,
        ge=MIN_PERCENTILE,
        le=MAX_PERCENTILE,
        description="int8/int4/fp8 only: take amax as this percentile of |x| instead of its "
        "maximum (e.g. 90), so the values above it are clipped",
    )
    scale: float | None = Field(
        default=None,
        ge=FLOAT32_MIN_NORMAL,
        le=MAX_SCALE,
        description="int8/int4/fp8 only: use this scale instead of amax / qmax (value units per "
        "element step); a scale below amax / qmax clips",
    )

    @model_validator(mode="after")
    def _override_fits_format(self) -> Params:
        chosen = [n for n in ("clip_percentile", "scale") if getattr(self, n) is not None]
        if len(chosen) > 1:
            raise ValueError("give clip_percentile or scale, not both")
        if chosen and self.format not in PER_TENSOR_FORMATS:
            raise ValueError(
                f"{chosen[0]} applies to one per-tensor scale ({', '.join(PER_TENSOR_FORMATS)}); "
                f"{self.format} derives its block scales itself"
            )
        return self


class ElementStep(BaseModel):
    index: int
    x: float
    x_over_scale: float = Field(description="x divided by its block's effective scale")
    element: float = Field(description="The rounded (and clamped) element value")
    code: str = Field(description="The stored code: an integer, or the bit pattern in hex")
    dequantized: float
    error: float = Field(description="dequantized − x")
    clipped: bool


class BlockStep(BaseModel):
    block: int
    amax: float
    exact_scale: float = Field(
        description="The scale before rounding to its stored type: NVFP4 amax_b / 6 / "
        "tensor_scale (E4M3 units), MXFP4 amax_b / 6"
    )
    stored_scale: float = Field(description="The stored scale, decoded (E4M3 or E8M0)")
    effective_scale: float = Field(description="What one element unit is worth in this block")
    derivation: str
    matches_labs_quant: bool = Field(description="The rule, applied here, gives the stored scale")


class ZeroCase(BaseModel):
    n_values: int
    naive_scale: float = Field(description="amax / qmax for an all-zero tensor: 0")
    naive_dequantized: list[str] = Field(description="(0 / 0) rounded and rescaled: NaN")
    naive_has_nan: bool
    eps_scale: float = Field(
        description="The scale clamped to float32 eps, as PyTorch observers do"
    )
    eps_dequantized_all_zero: bool
    labs_quant_scale: float = Field(description="The scale labs.quant stores for it")
    labs_quant_dequantized_all_zero: bool
    labs_quant_has_nan: bool
    clamp_of_nan: str = Field(
        description="torch.clamp(NaN, -qmax, qmax): a clamp does not cure NaN"
    )


class CastDemo(BaseModel):
    dtype: str
    max_finite: float
    probes: list[str] = Field(description="What each probe value is")
    inputs: list[float | str]
    cast_then_clamp: list[float | str] = Field(
        description="Stored fp8 value when the cast comes first (a clamp afterwards is too late)"
    )
    clamp_on_fp8_tensor: str = Field(
        description="What torch does when asked to clamp the fp8 tensor"
    )
    clamp_then_cast: list[float | str] = Field(description="Stored fp8 value when clamped first")
    cast_then_clamp_nonfinite: int
    clamp_then_cast_nonfinite: int
    dot_cast_then_clamp: float | str = Field(description="Σ stored·(+1, −1, …), cast first")
    dot_clamp_then_cast: float | str = Field(description="Σ stored·(+1, −1, …), clamped first")


class Result(LabResult):
    format: str
    n_values: int
    amax: float
    qmax: float = Field(description="Largest element value of the format (before scaling)")
    scale_source: str
    scale: float | None = Field(
        description="The per-tensor scale: amax / qmax (int/fp8, after any override) or NVFP4's "
        "float32 tensor scale; None for MXFP4"
    )
    first_block_scale: float = Field(description="Effective scale of the first block")
    blocks: list[BlockStep]
    elements: list[ElementStep]
    elements_shown: int
    matches_labs_quant: bool | None = Field(
        description="The step-by-step result equals labs.quant's; None with an overridden scale"
    )
    error: ErrorSummary
    max_abs_error: float
    clipped: int
    zero_case: ZeroCase
    casts: list[CastDemo]
