"""Lab ``dot-product-scales``: where the scales go in a quantized matmul.

``C = A @ W.T`` with activations A (m × k) and weights W (n × k), both quantized
along K. A scale that is constant along K (per tensor, per row) factors out of
the dot product, so a kernel sums the element products first and multiplies by
``s_a[i] · s_w[j]`` once, in its epilogue — exact. A block scale changes inside
the sum: it must be applied to each K block's partial sum inside the reduction
(what MX / NVFP4 tensor cores and GGUF's dot kernels do). Applied after the full
dot product instead, one scale per row stands in for many and the result is
wrong by far more than the quantization error.

The lab computes, against the float32 product of the unquantized operands:
(a) per-channel (or per-tensor) scales after the dot product, (b) the chosen
block scales inside the reduction (``labs.quant.matmul``), (c) the same block
scales wrongly applied after the full dot product; then what an integer
accumulator must hold (K · 127² for int8) and, for asymmetric (zero-point)
quantization, the cross terms the zero points add to every dot product.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU
from labs.presenters import concepts
from labs.quant.spec import SPECS, FormatKey

if TYPE_CHECKING:
    import torch

    from labs.quant import QuantizedTensor

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


def _label(g: str | int) -> str:
    return f"block {g}" if isinstance(g, int) else g


def _rel(c: torch.Tensor, ref: torch.Tensor) -> float:
    import torch

    diff = torch.linalg.vector_norm(c.double() - ref)
    norm = float(torch.linalg.vector_norm(ref))
    return float(diff) / norm if norm else float(diff)


def _operands(params: Params) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    g = torch.Generator(device="cpu").manual_seed(params.seed)
    a = torch.randn(params.m, params.k, generator=g)
    w = torch.randn(params.n, params.k, generator=g)
    if params.outliers:
        a[:, ::OUTLIER_CHANNEL_EVERY] *= OUTLIER_SCALE
    return a, w


def _quantize(x: torch.Tensor, fmt: str, g: str | int, zero_point: bool = False) -> QuantizedTensor:
    from labs.quant import quantize

    if fmt in FIXED_BLOCK:
        return quantize(x, fmt)
    options: dict[str, object] = {"granularity": g}
    if zero_point:
        options["zero_point"] = True
    return quantize(x, fmt, **options)


def _grouped(
    q: QuantizedTensor, group: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Element values as (rows, groups, group) float64, zero beyond K, with the scale and
    offset of each (row, group)."""
    import torch

    rows, k = q.shape
    n_groups = -(-k // group)
    aff = q.affine()
    elements = torch.zeros(rows, n_groups * group, dtype=torch.float64)
    elements[:, :k] = q.unblock(aff.elements).double()
    per_row = aff.scale.double().reshape(rows, -1)
    expand = per_row.shape[1] != n_groups  # tensor or channel scales: one per row
    scale = per_row[:, :1].expand(rows, n_groups) if expand else per_row
    offset = None
    if aff.offset is not None:
        off = aff.offset.double().reshape(rows, -1)
        offset = off[:, :1].expand(rows, n_groups) if expand else off
    return elements.reshape(rows, n_groups, group), scale, offset


def _accumulator(
    fmt: str, qa: QuantizedTensor, qw: QuantizedTensor, span: int, k: int
) -> AccumulatorReport:
    import torch

    from labs.quant import FORMAT_LIMITS

    element_max = float(FORMAT_LIMITS[fmt]["max"])
    max_product = element_max * element_max
    ea, _, _ = _grouped(qa, span)
    ew, _, _ = _grouped(qw, span)
    block_sums = torch.einsum("igt,jgt->gij", ea, ew)
    full = block_sums.sum(dim=0)
    integer = fmt in INTEGER_FORMATS
    int16_max = INT16_MAX // int(max_product) if integer else None
    return AccumulatorReport(
        element_max=element_max,
        max_product=max_product,
        accumulation_span=min(span, k),
        integer=integer,
        int16_max_k=int16_max,
        int16_overflow_k=None if int16_max is None else int16_max + 1,
        int32_max_k=INT32_MAX // int(max_product) if integer else None,
        observed_max_abs_sum=float(full.abs().max()),
        observed_max_abs_block_sum=float(block_sums.abs().max()),
        outputs_beyond_int16=int((full.abs() > INT16_MAX).sum()) if integer else None,
    )


def _asymmetric(params: Params, a: torch.Tensor, w: torch.Tensor) -> AsymmetricReport:
    """Both operands with zero points; the dot product split into its four terms."""
    import torch

    from labs.quant.matmul import quantized_matmul

    g = params.granularity_used
    # After a GELU activations are skewed (≥ −0.17): the case zero points are meant for.
    act = torch.nn.functional.gelu(a)
    qa = _quantize(act, params.format, g, zero_point=True)
    qw = _quantize(w, params.format, g, zero_point=True)
    group = g if isinstance(g, int) else params.k
    ea, sa, oa = _grouped(qa, group)
    ew, sw, ow = _grouped(qw, group)
    assert oa is not None and ow is not None
    counts = (params.k - torch.arange(ea.shape[1], dtype=torch.float64) * group).clamp(0, group)
    main = torch.einsum("igt,jgt,ig,jg->ij", ea, ew, sa, sw)
    cross_w = torch.einsum("ig,ig,jg->ij", sa, ea.sum(dim=2), ow)  # s_a·o_w·Σ q_a
    cross_a = torch.einsum("ig,jg,jg->ij", oa, sw, ew.sum(dim=2))  # o_a·s_w·Σ q_w
    const = torch.einsum("ig,jg,g->ij", oa, ow, counts)  # K_b·o_a·o_w
    exact = qa.dequantize().double() @ qw.dequantize().double().T
    total = main + cross_w + cross_a + const
    kernel = quantized_matmul(qa, qw, out_dtype=torch.float64)

    def zero_point(q: QuantizedTensor) -> float:
        zp = q.zero_points
        return float(zp.float().mean()) if zp is not None else 0.0

    return AsymmetricReport(
        granularity=_label(g),
        mean_zero_point_a=zero_point(qa),
        mean_zero_point_w=zero_point(qw),
        rel_error_main_term_only=_rel(main, exact),
        rel_error_without_constant=_rel(main + cross_w + cross_a, exact),
        rel_error_all_terms=_rel(total, exact),
        matches_labs_quant=_rel(total, kernel) < FLOAT64_AGREEMENT,
        term_norms={
            "s_a·s_w·Σ q_a·q_w": float(torch.linalg.vector_norm(main)),
            "s_a·o_w·Σ q_a": float(torch.linalg.vector_norm(cross_w)),
            "o_a·s_w·Σ q_w": float(torch.linalg.vector_norm(cross_a)),
            "K_b·o_a·o_w": float(torch.linalg.vector_norm(const)),
        },
    )


@dataclass(frozen=True)
class Product:
    """The computed result, and whether the chosen scales vary along K (which the
    narration turns on; not part of the result)."""

    result: Result
    scales_vary_along_k: bool


def run(params: Params, ctx: Context) -> Result:
    from labs.presenters.dot_product_scales import present

    product = multiply(params)
    present(product, params, ctx)
    return product.result


def multiply(params: Params) -> Product:
    """C = A·Wᵀ with the scales placed three ways, the accumulator it needs, and (integer
    formats) the zero-point cross terms."""
    from labs.quant.matmul import scale_placement_error

    fmt, g = params.format, params.granularity_used
    label = _label(g)
    a, w = _operands(params)
    reference = a.double() @ w.double().T  # exact product of the float32 operands
    qa, qw = _quantize(a, fmt, g), _quantize(w, fmt, g)
    chosen = scale_placement_error(qa, qw, row_scale=WRONG_ROW_SCALE)
    placements = []
    rel_a: float | None = None
    if fmt not in FIXED_BLOCK:
        g_a = g if isinstance(g, str) else "channel"
        per_row = (
            chosen
            if isinstance(g, str)
            else scale_placement_error(_quantize(a, fmt, g_a), _quantize(w, fmt, g_a))
        )
        rel_a = _rel(per_row.after, reference)
        placements.append(
            Placement(
                name="(a) per-row scales after the dot product",
                granularity=g_a,
                rel_error_vs_fp32=rel_a,
                rel_error_vs_dequantized=_rel(per_row.after, per_row.exact),
            )
        )
    rel_b = _rel(chosen.inside, reference)
    rel_c = _rel(chosen.after, reference)
    placements += [
        Placement(
            name="(b) scales per K block, inside the reduction",
            granularity=label,
            rel_error_vs_fp32=rel_b,
            rel_error_vs_dequantized=_rel(chosen.inside, chosen.exact),
        ),
        Placement(
            name=f"(c) one scale per row ({WRONG_ROW_SCALE} of its block scales) after the full dot product",
            granularity=label,
            rel_error_vs_fp32=rel_c,
            rel_error_vs_dequantized=_rel(chosen.after, chosen.exact),
        ),
    ]
    span = g if isinstance(g, int) else params.k
    acc = _accumulator(fmt, qa, qw, span, params.k)
    asym = _asymmetric(params, a, w) if fmt in INTEGER_FORMATS else None
    assert math.isfinite(rel_b) and math.isfinite(rel_c)
    result = Result(
        format=fmt,
        m=params.m,
        k=params.k,
        n=params.n,
        granularity=label,
        outliers=params.outliers,
        placements=placements,
        rel_error_a=rel_a,
        rel_error_b=rel_b,
        rel_error_c=rel_c,
        c_over_b=rel_c / rel_b if rel_b else None,
        accumulator=acc,
        int16_overflow_k=acc.int16_overflow_k,
        int32_max_k=acc.int32_max_k,
        asymmetric=asym,
    )
    return Product(result, chosen.scales_vary_along_k)


LAB = Lab(
    id="dot-product-scales",
    title="Scales in a quantized dot product",
    summary="Quantize both operands of a matmul and apply the scales after the dot product "
    "(per channel), per K block inside the reduction, or — wrongly — block scales after the "
    "full dot product; compare each with fp32, see what an int32 accumulator must hold, and "
    "the cross terms zero points add.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    time_limit_s=60.0,
    memory_limit_mb=2048,
    numeric_outputs=(
        ("rel_error_b", "fraction"),
        ("rel_error_c", "fraction"),
        ("int16_overflow_k", "elements of K"),
        ("int32_max_k", "elements of K"),
    ),
    concept=concepts.dot_product_scales,
)
