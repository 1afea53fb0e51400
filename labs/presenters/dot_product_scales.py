"""dot-product-scales' presenter: the three placements, the accumulator, the zero-point
terms and one chart."""

from __future__ import annotations

from typing import Any

from labs.base import Context
from labs.dot_product_scales import (
    FIXED_BLOCK,
    OUTLIER_CHANNEL_EVERY,
    OUTLIER_SCALE,
    PERCENT,
    AccumulatorReport,
    AsymmetricReport,
    Params,
    Product,
)


def present(product: Product, params: Params, ctx: Context) -> None:
    """Emit the run's events, in the order the run page shows them."""
    r = product.result
    fmt, g, label = r.format, params.granularity_used, r.granularity
    ctx.progress(0.05, "operands")
    outlier_note = (
        f", every {OUTLIER_CHANNEL_EVERY}th activation channel ×{OUTLIER_SCALE:g}"
        if params.outliers
        else ""
    )
    ctx.log(
        f"A: {params.m}×{params.k}, W: {params.n}×{params.k}, normal{outlier_note}; both "
        f"quantized to {fmt} along K with {label} scales."
    )
    if fmt in FIXED_BLOCK:
        ctx.log(f"{fmt} fixes its block at {g} elements along K (the granularity is ignored).")
    ctx.progress(0.2, f"{label} scales: inside vs after the reduction")
    if fmt not in FIXED_BLOCK:
        ctx.progress(0.4, "per-channel scales after the dot product")
    _placements(product, ctx)
    ctx.progress(0.6, "accumulator width")
    _accumulator(fmt, r.accumulator, ctx)
    if r.asymmetric is not None:
        ctx.progress(0.75, "zero points: the cross terms")
        _asymmetric(fmt, r.asymmetric, ctx)
    ctx.progress(0.9, "chart")
    _chart(product, ctx)
    ctx.progress(1.0, "done")


def _placements(product: Product, ctx: Context) -> None:
    r = product.result
    placements = r.placements
    ctx.table(
        f"C = A·Wᵀ ({r.m}×{r.k} · {r.k}×{r.n}), {r.format}: relative error (Frobenius)",
        ["placement", "scales", "vs fp32 operands", "vs dequantized operands (float64)"],
        [
            [p.name, p.granularity, p.rel_error_vs_fp32, p.rel_error_vs_dequantized]
            for p in placements
        ],
    )
    if product.scales_vary_along_k:
        ctx.log(
            f"Block scales inside the reduction match the dequantized product to "
            f"{placements[-2].rel_error_vs_dequantized:.1e}: what is left is quantization error. "
            f"Applied after the full dot product they are {r.c_over_b:.1f}× worse against fp32."
        )
    else:
        ctx.log(
            f"{r.granularity} scales are constant along K: they factor out of the dot product, "
            "so applying them after it is exact and (a), (b) and (c) coincide."
        )
    ctx.metric("rel_error_b", r.rel_error_b * PERCENT, "%", "(b) block scales inside the reduction")
    ctx.metric(
        "rel_error_c", r.rel_error_c * PERCENT, "%", "(c) block scales after the dot product"
    )
    if r.rel_error_a is not None:
        ctx.metric(
            "rel_error_a", r.rel_error_a * PERCENT, "%", "(a) per-row scales after the dot product"
        )


def _accumulator(fmt: str, acc: AccumulatorReport, ctx: Context) -> None:
    rows: list[list[Any]] = [
        ["largest |element|", acc.element_max],
        ["largest |product| = element_max²", acc.max_product],
        ["products summed per scale (block or K)", acc.accumulation_span],
        ["largest |sum| seen, per block", acc.observed_max_abs_block_sum],
        ["largest |sum| seen, whole K", acc.observed_max_abs_sum],
    ]
    if acc.integer:
        assert acc.int16_max_k is not None and acc.int32_max_k is not None
        rows += [
            ["K that always fits int16 (⌊32767 / max product⌋)", acc.int16_max_k],
            ["K at which int16 can overflow", acc.int16_overflow_k],
            ["K that always fits int32", acc.int32_max_k],
            ["outputs here beyond int16 over the whole K", acc.outputs_beyond_int16],
        ]
        ctx.log(
            f"{fmt} products are integers up to {acc.max_product:g}: an int16 accumulator can "
            f"overflow from K = {acc.int16_overflow_k}, so integer GEMMs accumulate in int32, "
            f"which holds any K up to {acc.int32_max_k:,}."
        )
    else:
        ctx.log(
            f"{fmt} element products (up to {acc.max_product:g}) are summed in float32 by tensor "
            "cores: overflow is not the risk, precision is (float32 keeps 24 significant bits)."
        )
    ctx.table("accumulator", ["quantity", "value"], rows)


def _asymmetric(fmt: str, asym: AsymmetricReport, ctx: Context) -> None:
    ctx.table(
        f"asymmetric {fmt} ({asym.granularity}): x = s·(q − z), Σ x·w = s_a·s_w·(Σ q_a·q_w "
        "− z_w·Σ q_a − z_a·Σ q_w + K·z_a·z_w)",
        ["terms kept", "relative error vs dequantized product"],
        [
            ["s_a·s_w·Σ q_a·q_w only (zero points ignored)", asym.rel_error_main_term_only],
            ["+ both cross terms", asym.rel_error_without_constant],
            ["+ the constant K·z_a·z_w (all four)", asym.rel_error_all_terms],
        ],
    )
    ctx.log(
        "The z_w·Σ q_a term needs a sum over K of each activation row at run time; Σ q_w is "
        "known per weight row in advance, so z_a·Σ q_w and K·z_a·z_w cost one rank-1 update. "
        "With symmetric weights (z_w = 0) only that cheap term is left, which is why weights "
        "are usually quantized symmetrically."
    )


def _chart(product: Product, ctx: Context) -> None:
    from labs.viz import charts

    placements = product.result.placements
    ctx.plot(
        "Relative error against the fp32 product",
        charts.bar_chart(
            [p.name.split(" ")[0] + " " + p.granularity for p in placements],
            [p.rel_error_vs_fp32 * PERCENT for p in placements],
            title=f"{product.result.format}: where the scales are applied",
            value_label="relative error vs fp32 (%)",
        ),
        {
            p.name: {"vs_fp32": p.rel_error_vs_fp32, "vs_dequantized": p.rel_error_vs_dequantized}
            for p in placements
        },
    )
