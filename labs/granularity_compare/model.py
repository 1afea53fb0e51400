"""granularity-compare's parameters and result (no torch)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from labs.base import LabParams, LabResult
from labs.quant.metrics import ErrorSummary
from labs.quant.spec import FormatKey

# The labs.quant formats that take a ``granularity`` option (a test checks them).
GranularFormatKey = Literal[FormatKey.INT8, FormatKey.INT4, FormatKey.FP8_E4M3, FormatKey.FP8_E5M2]


Distribution = Literal["normal", "uniform", "laplace", "outliers"]


MAX_ROWS = 1024


MAX_COLS = 4096


DEFAULT_SHAPE = (256, 1024)


MAX_SEED = 2**31 - 1


DEFAULT_OUTLIER_SCALE = 50.0


MAX_OUTLIER_SCALE = 10_000.0


DEFAULT_OUTLIER_FRACTION = 0.001  # LLM activations: a few values ~20-100× the rest


MAX_OUTLIER_FRACTION = 0.1


BLOCK_SIZES = (16, 32, 64, 128)


GRANULARITIES: tuple[str | int, ...] = ("tensor", "channel", *BLOCK_SIZES)


# The block size whose numbers are also returned at the top level of the result.
HEADLINE_BLOCK = 32


BITS_PER_BYTE = 8


# One more bit of a uniform quantizer's resolution halves its step: 20·log10(2) dB.
DB_PER_BIT = 20 * math.log10(2)


HISTOGRAM_BINS = 20


# The chart bins a random sample of at most this many errors per granularity.
PLOT_SAMPLE = 20_000


# The chart's smallest |error| bin starts at this quantile of the non-zero errors.
HISTOGRAM_LOW_QUANTILE = 0.001


PERCENT = 100.0


# Keeps the Laplace inverse CDF finite (log of 0 at u = 0 or 1).
LAPLACE_U_MIN = 1e-7


class Params(LabParams):
    format: GranularFormatKey = Field(
        default=FormatKey.INT4,
        description="Format to quantize to: int8, int4 (symmetric, float32 scales), fp8_e4m3 or "
        "fp8_e5m2 (float32 scales) — the labs.quant formats whose scale granularity is an option",
    )
    shape: list[int] = Field(
        default=list(DEFAULT_SHAPE),
        min_length=2,
        max_length=2,
        description=f"[rows, cols] of the tensor, rows 1 to {MAX_ROWS}, cols 1 to {MAX_COLS}; "
        "blocks and channels run along the rows (cols elements each)",
    )
    distribution: Distribution = Field(
        default="outliers",
        description="normal, uniform (-1..1), laplace (heavy-tailed), or outliers (normal with "
        "outlier_fraction of the values multiplied by outlier_scale)",
    )
    outlier_scale: float = Field(
        default=DEFAULT_OUTLIER_SCALE,
        ge=1.0,
        le=MAX_OUTLIER_SCALE,
        description="With distribution outliers: the factor the outliers are multiplied by",
    )
    outlier_fraction: float = Field(
        default=DEFAULT_OUTLIER_FRACTION,
        gt=0.0,
        le=MAX_OUTLIER_FRACTION,
        description="With distribution outliers: the share of values made outliers "
        "(at least one value)",
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Random seed for the tensor")

    @field_validator("shape")
    @classmethod
    def _dims(cls, shape: list[int]) -> list[int]:
        for name, n, top in (("rows", shape[0], MAX_ROWS), ("cols", shape[1], MAX_COLS)):
            if not 1 <= n <= top:
                raise ValueError(f"{name} must be between 1 and {top}, not {n}")
        return shape


class GranularityRow(BaseModel):
    granularity: str
    n_scales: int
    nbytes: int = Field(description="Every stored byte: codes, scales (and padding)")
    scale_overhead_bytes: int = Field(description="Bytes of scales alone")
    bits_per_value: float = Field(description="8 · nbytes / values")
    error: ErrorSummary
    sqnr_db_per_bit: float | None = Field(description="SQNR (dB) / bits per value")
    db_per_extra_bit: float | None = Field(
        description="SQNR gained over per-tensor scales per extra stored bit (dB/bit); "
        f"widening the element by one bit buys about {DB_PER_BIT:.2f} dB"
    )


class Result(LabResult):
    format: str
    shape: list[int]
    distribution: str
    numel: int
    tensor_absmax: float
    rows: list[GranularityRow]
    best_by_sqnr: str
    best_by_sqnr_per_bit: str
    sqnr_db_tensor: float | None
    sqnr_db_block_32: float | None
    sqnr_gain_db_block_32: float | None = Field(description="SQNR of block 32 − per tensor, dB")
    scale_overhead_bytes_block_32: int
    bits_per_value_block_32: float
