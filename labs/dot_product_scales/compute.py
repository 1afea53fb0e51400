"""dot-product-scales's computation (torch is imported inside the functions)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from labs.base import Context

if TYPE_CHECKING:
    import torch

    from labs.quant import QuantizedTensor
from labs.dot_product_scales.model import (
    FIXED_BLOCK,
    FLOAT64_AGREEMENT,
    INT16_MAX,
    INT32_MAX,
    INTEGER_FORMATS,
    OUTLIER_CHANNEL_EVERY,
    OUTLIER_SCALE,
    WRONG_ROW_SCALE,
    AccumulatorReport,
    AsymmetricReport,
    Params,
    Placement,
    Result,
)


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


def run(params: Params, ctx: Context) -> Product:
    return multiply(params, ctx.progress)


def _no_progress(fraction: float, message: str = "") -> None:
    pass


def multiply(params: Params, progress: Callable[[float, str], None] = _no_progress) -> Product:
    """C = A·Wᵀ with the scales placed three ways, the accumulator it needs, and (integer
    formats) the zero-point cross terms; ``progress`` hears of each step as it starts."""
    from labs.quant.matmul import scale_placement_error

    fmt, g = params.format, params.granularity_used
    label = _label(g)
    progress(0.05, "operands")
    a, w = _operands(params)
    reference = a.double() @ w.double().T  # exact product of the float32 operands
    progress(0.2, f"{label} scales: inside vs after the reduction")
    qa, qw = _quantize(a, fmt, g), _quantize(w, fmt, g)
    chosen = scale_placement_error(qa, qw, row_scale=WRONG_ROW_SCALE)
    placements = []
    rel_a: float | None = None
    if fmt not in FIXED_BLOCK:
        progress(0.4, "per-channel scales after the dot product")
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
    progress(0.6, "accumulator width")
    acc = _accumulator(fmt, qa, qw, span, params.k)
    asym = None
    if fmt in INTEGER_FORMATS:
        progress(0.75, "zero points: the cross terms")
        asym = _asymmetric(params, a, w)
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
