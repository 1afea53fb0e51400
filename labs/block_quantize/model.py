"""block-quantize's parameters and result (no torch); what the lab shows is in the
package's docstring (``labs.block_quantize``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, FiniteFloat, ValidationInfo, field_validator, model_validator

from labs.base import LabParams, LabResult
from labs.quant.metrics import ErrorSummary
from labs.quant.spec import FormatKey

# The labs.quant format keys, from its torch-free table (validating a request imports no torch).
FORMAT_KEYS: tuple[str, ...] = tuple(key.value for key in FormatKey)
Distribution = Literal["normal", "uniform", "laplace", "outliers", "custom"]

MAX_DIM = 4096  # rows and cols each; 4096 × 4096 float32 = 64 MiB
DEFAULT_SHAPE = (256, 256)
MAX_CUSTOM_VALUES = 65_536
MAX_SEED = 2**31 - 1
# Outliers: this fraction of the values is multiplied by OUTLIER_SCALE (LLM
# activations have a few channels ~20-100× the rest).
OUTLIER_FRACTION = 0.001
OUTLIER_SCALE = 50.0
# How much of the quantized tensor the result shows element by element.
SHOWN_BLOCKS = 4
SHOWN_ELEMENTS_PER_BLOCK = 32
HISTOGRAM_BINS = 40
# Outliers in a histogram: when the full range is over OUTLIER_RANGE_RATIO times the
# central (1 - 2·CENTRAL_TAIL) range, only that range (plus a margin) is binned and
# the values beyond it are counted apart. Percentiles come from a strided sample.
CENTRAL_TAIL = 0.001
OUTLIER_RANGE_RATIO = 3.0
CENTRAL_MARGIN = 0.1
HISTOGRAM_SAMPLE = 1 << 16
BITS_PER_BYTE = 8
FP32_BITS = 32
BF16_BITS = 16


class BlockQuantizeParams(LabParams):
    format: FormatKey = Field(
        default=FormatKey.NVFP4, title="Format", description="The labs.quant format to quantize to"
    )
    shape: list[int] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description=f"[rows, cols], each 1 to {MAX_DIM}; blocks run along cols. "
        f"Empty: {DEFAULT_SHAPE[0]}, {DEFAULT_SHAPE[1]}, or 1, len(values) with custom values",
    )
    distribution: Distribution = Field(
        default="normal",
        description="normal, uniform (-1..1), laplace (heavy-tailed), outliers (normal with "
        f"{OUTLIER_FRACTION:.1%} of values ×{OUTLIER_SCALE:g}) or custom (your values)",
    )
    values: list[FiniteFloat] | None = Field(
        default=None,
        max_length=MAX_CUSTOM_VALUES,
        description="With distribution custom: the tensor's values in row-major order, e.g. the 16 values of one NVFP4 block",
        validate_default=True,
    )
    seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="Random seed for the generated distributions"
    )

    @model_validator(mode="before")
    @classmethod
    def _default_shape(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("shape") is None:
            values = data.get("values")
            if (
                data.get("distribution") == "custom"
                and isinstance(values, list)
                and 0 < len(values) <= MAX_DIM
            ):
                data = {**data, "shape": [1, len(values)]}
            elif data.get("distribution") != "custom":
                data = {**data, "shape": list(DEFAULT_SHAPE)}
        return data

    @field_validator("shape")
    @classmethod
    def _dims(cls, shape: list[int] | None) -> list[int] | None:
        if shape is not None:
            for name, n in zip(("rows", "cols"), shape, strict=True):
                if not 1 <= n <= MAX_DIM:
                    raise ValueError(f"{name} must be between 1 and {MAX_DIM}, not {n}")
        return shape

    @field_validator("values")
    @classmethod
    def _values(cls, values: list[float] | None, info: ValidationInfo) -> list[float] | None:
        dist = info.data.get("distribution")
        if dist != "custom":
            if values is not None:
                raise ValueError("values are used only with distribution custom")
            return None
        if not values:
            raise ValueError("distribution custom needs values, e.g. [0.1, -2.5, 3.0, …]")
        shape = info.data.get("shape")
        if shape is None and "shape" not in info.data:
            return values  # the shape itself is invalid; its own error says why
        if shape is None:
            raise ValueError(
                f"{len(values)} values need a shape [rows, cols] (more than {MAX_DIM} in one row)"
            )
        if shape[0] * shape[1] != len(values):
            raise ValueError(
                f"shape {shape} holds {shape[0] * shape[1]} values but {len(values)} were given"
            )
        return values

    @property
    def dims(self) -> tuple[int, int]:
        assert self.shape is not None
        return self.shape[0], self.shape[1]


class BlockView(BaseModel):
    index: int
    scale: float = Field(
        description="Decoded stored scale of the block (NVFP4: the E4M3 block scale)"
    )
    effective_scale: float = Field(
        description="What one step of the element grid is worth in this block"
    )
    offset: float | None = None
    stored: str | None = Field(
        default=None,
        description="How a two-level scale is stored (k-quants: the super-block's fp16 d "
        "times the sub-block's integer scale, and the same for the minimum)",
    )
    size: int | None = Field(
        default=None, description="Values in the whole block (values shows the first ones)"
    )
    absmax: float | None = Field(default=None, description="Largest |value| in the whole block")
    values: list[float]
    codes: list[int]
    dequantized: list[float]


class Histogram(BaseModel):
    """Counts over ``edges``; where a few far values would squash the rest into two
    bars, the edges span the central values and ``below``/``above`` count the rest."""

    edges: list[float]
    counts: list[int]
    below: int = Field(default=0, description="Values left of the first edge")
    above: int = Field(default=0, description="Values right of the last edge")
    min: float | None = Field(default=None, description="The smallest value, shown or not")
    max: float | None = Field(default=None, description="The largest value, shown or not")


class BlockQuantizeResult(LabResult):
    format: str
    element: str
    scale_type: str
    shape: list[int]
    numel: int
    device: str
    block_size: int | None
    n_blocks: int
    nbytes: int = Field(
        description="Every stored byte: payload, scales, zero points, tensor scales"
    )
    bits_per_value: float = Field(description="8 · nbytes / numel for this tensor")
    nominal_bits_per_value: float = Field(
        description="The format's bits per value, scales included"
    )
    compression_vs_fp32: float
    compression_vs_bf16: float
    metrics: ErrorSummary
    first_blocks: list[BlockView]
    histograms: dict[str, Histogram]
