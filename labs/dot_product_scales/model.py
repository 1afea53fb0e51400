"""dot-product-scales' parameters and result (no torch); the lab's story is in the
package's docstring (``labs.dot_product_scales``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from labs.base import LabParams, LabResult
from labs.quant.spec import SPECS, FormatKey

FormatChoice = Literal[
    FormatKey.INT8, FormatKey.INT4, FormatKey.FP8_E4M3, FormatKey.NVFP4, FormatKey.MXFP4
]
Granularity = Literal["tensor", "channel", 16, 32, 64, 128]
INTEGER_FORMATS = (FormatKey.INT8, FormatKey.INT4)
# Formats whose block size is part of the format, not an option.
FIXED_BLOCK = {k: b for k in (FormatKey.NVFP4, FormatKey.MXFP4) if (b := SPECS[k].block_size)}

MAX_M = 512
MAX_N = 512
MAX_K = 8192
MAX_MACS = 1 << 26  # m·n·k multiply-adds: a few seconds of float64 matmuls on a CPU
MAX_SEED = 2**31 - 1
# Outliers: one activation channel (column of A) in OUTLIER_CHANNEL_EVERY is multiplied
# by OUTLIER_SCALE, as in LLM activations (LLM.int8(): a few feature dims ~20-100× larger).
OUTLIER_CHANNEL_EVERY = 128
OUTLIER_SCALE = 50.0
# Which single scale per row stands in for a row's block scales in the wrong placement.
WRONG_ROW_SCALE = "mean"
INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
PERCENT = 100.0
# Two float64 evaluations of the same sum in a different order agree to about this.
FLOAT64_AGREEMENT = 1e-9


class Params(LabParams):
    m: int = Field(default=64, ge=1, le=MAX_M, description=f"Rows of A (tokens), 1 to {MAX_M}")
    k: int = Field(
        default=512,
        ge=1,
        le=MAX_K,
        description=f"Inner dimension K (the dot product length), 1 to {MAX_K}",
    )
    n: int = Field(
        default=64, ge=1, le=MAX_N, description=f"Rows of W (output channels), 1 to {MAX_N}"
    )
    format: FormatChoice = Field(
        default=FormatKey.INT8,
        description="Format of both operands: int8, int4 (symmetric, float32 scales), fp8_e4m3 "
        "(float32 scales), nvfp4 (blocks of 16) or mxfp4 (blocks of 32)",
    )
    granularity: Granularity = Field(
        default=32,
        description="Scale granularity along K for int8/int4/fp8_e4m3: tensor, channel (one per "
        "row) or a block size 16/32/64/128; nvfp4 and mxfp4 ignore it: their block (16, 32) is "
        "part of the format",
    )
    outliers: bool = Field(
        default=True,
        description=f"Multiply one activation channel in {OUTLIER_CHANNEL_EVERY} (a column of A) "
        f"by {OUTLIER_SCALE:g}, as LLM activations have",
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Random seed for A and W")

    @field_validator("granularity", mode="before")
    @classmethod
    def _block_size_from_text(cls, v: object) -> object:
        # A form's select submits "32"; the block sizes are ints.
        return int(v) if isinstance(v, str) and v.isdigit() else v

    @model_validator(mode="after")
    def _bounded_work(self) -> Params:
        if self.m * self.n * self.k > MAX_MACS:
            raise ValueError(
                f"m·n·k = {self.m * self.n * self.k:,} multiply-adds; at most {MAX_MACS:,}"
            )
        return self

    @property
    def granularity_used(self) -> str | int:
        return FIXED_BLOCK.get(self.format, self.granularity)


class Placement(BaseModel):
    name: str
    granularity: str
    rel_error_vs_fp32: float = Field(
        description="‖C − A·Wᵀ‖ / ‖A·Wᵀ‖ (Frobenius), unquantized fp32"
    )
    rel_error_vs_dequantized: float = Field(
        description="‖C − deq(A)·deq(W)ᵀ‖ / ‖…‖ against a float64 product of the dequantized "
        "operands: zero up to rounding when the scales are placed correctly"
    )


class AccumulatorReport(BaseModel):
    element_max: float = Field(description="Largest |element| of the format")
    max_product: float = Field(description="Largest |element product| = element_max²")
    accumulation_span: int = Field(
        description="Products summed before a scale is applied: the block, or K for per-channel"
    )
    integer: bool
    int16_max_k: int | None = Field(
        description="Longest sum that always fits int16: ⌊32767 / max_product⌋"
    )
    int16_overflow_k: int | None = Field(description="The first K at which int16 can overflow")
    int32_max_k: int | None = Field(description="Longest sum that always fits int32")
    observed_max_abs_sum: float = Field(description="Largest |sum of element products| seen over K")
    observed_max_abs_block_sum: float = Field(description="… and over one accumulation span")
    outputs_beyond_int16: int | None = Field(
        description="Integer formats: outputs whose full-K element sum exceeds int16"
    )


class AsymmetricReport(BaseModel):
    """Zero points: x = s·(q − z) per block, so Σ x·w has four terms."""

    granularity: str
    mean_zero_point_a: float
    mean_zero_point_w: float
    rel_error_main_term_only: float = Field(
        description="s_a·s_w·Σ q_a·q_w alone, zero points ignored"
    )
    rel_error_without_constant: float = Field(description="Main term plus both cross terms")
    rel_error_all_terms: float = Field(description="All four terms: equals the dequantized product")
    matches_labs_quant: bool = Field(
        description="The four terms add up to labs.quant.matmul.quantized_matmul's result"
    )
    term_norms: dict[str, float] = Field(description="Frobenius norm of each term")


class Result(LabResult):
    format: str
    m: int
    k: int
    n: int
    granularity: str
    outliers: bool
    placements: list[Placement]
    rel_error_a: float | None = Field(
        description="(a) per-channel scales after the dot product, vs fp32"
    )
    rel_error_b: float = Field(description="(b) block scales inside the reduction, vs fp32")
    rel_error_c: float = Field(description="(c) block scales after the full dot product, vs fp32")
    c_over_b: float | None = Field(description="How many times (c)'s error exceeds (b)'s")
    accumulator: AccumulatorReport
    int16_overflow_k: int | None
    int32_max_k: int | None
    asymmetric: AsymmetricReport | None
