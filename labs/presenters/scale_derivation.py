"""scale-derivation's presenter: the derivation as log lines, tables, metrics and one
figure, then the all-zero tensor and the fp8 casts."""

from __future__ import annotations

from labs.base import Context
from labs.scale_derivation import PER_TENSOR_FORMATS, CastDemo, Derivation, Result, ZeroCase


def present(derivation: Derivation, ctx: Context) -> None:
    """The derivation as log lines, tables, metrics and one figure, then the edge cases."""
    r = derivation.result
    ctx.progress(0.05, "deriving the scale")
    for line in derivation.lines:
        ctx.log(line)
    if r.matches_labs_quant is not None:
        ctx.log(
            f"The step-by-step values equal labs.quant's dequantized tensor: {r.matches_labs_quant}"
        )
    ctx.progress(0.4, "per element")
    _element_tables(r, derivation.n_blocks, ctx)
    _metrics(r, ctx)
    _plot(r, ctx)
    ctx.progress(0.6, "the all-zero tensor")
    _zero_table(r.format, r.zero_case, ctx)
    ctx.progress(0.8, "fp8 casts: clamp first or cast first")
    for c in r.casts:
        _cast_table(c, ctx)
    ctx.progress(1.0, "done")


def _element_tables(r: Result, n_blocks: int, ctx: Context) -> None:
    fmt, split = r.format, r.error
    if r.blocks:
        ctx.table(
            f"{fmt}: block scales (first {len(r.blocks)} of {n_blocks})",
            ["block", "amax_b", "exact scale", "stored scale", "effective scale", "how"],
            [
                [b.block, b.amax, b.exact_scale, b.stored_scale, b.effective_scale, b.derivation]
                for b in r.blocks
            ],
        )
    ctx.table(
        f"{fmt}: each value (first {r.elements_shown} of {r.n_values})",
        ["i", "x", "x / scale", "element", "code", "dequantized", "error", "clipped"],
        [
            [s.index, s.x, s.x_over_scale, s.element, s.code, s.dequantized, s.error, s.clipped]
            for s in r.elements
        ],
    )
    ctx.table(
        "error split",
        ["", "MSE", "share"],
        [
            [
                "rounding (values inside the range)",
                split.rounding_mse,
                _share(split.rounding_mse, split.mse),
            ],
            [
                "clipping (values beyond it)",
                split.clipping_mse,
                _share(split.clipping_mse, split.mse),
            ],
            ["total", split.mse, 1.0 if split.mse else None],
        ],
    )


def _metrics(r: Result, ctx: Context) -> None:
    fmt, split = r.format, r.error
    ctx.metric("amax", r.amax, "", "amax = max|x|")
    if r.scale is not None:
        ctx.metric("scale", r.scale, "", "scale" if fmt != "nvfp4" else "tensor scale")
    ctx.metric("clipped", float(split.clipped), "values", "values clipped")
    ctx.metric("max_abs_error", split.max_abs_error, "", "max |error|")
    if split.sqnr_db is not None:
        ctx.metric("sqnr_db", split.sqnr_db, "dB", "SQNR")
    if split.clipped == 0 and r.scale_source in ("absmax", "format") and fmt in PER_TENSOR_FORMATS:
        ctx.log(
            "Nothing was clipped: scale = amax / qmax puts amax on the largest code. "
            "Set clip_percentile (e.g. 90) or scale to see clipping error."
        )


def _plot(r: Result, ctx: Context) -> None:
    from labs.viz import charts

    steps = r.elements
    order = sorted(range(r.elements_shown), key=lambda i: steps[i].x)
    xs = [steps[i].x for i in order]
    ctx.plot(
        "Each value and what comes back",
        charts.line_chart(
            {
                "dequantized": (xs, [steps[i].dequantized for i in order]),
                "x (no error)": ([xs[0], xs[-1]], [xs[0], xs[-1]]),
            },
            title=f"{r.format}: the values, sorted, and their dequantized values",
            x_label="x",
            y_label="value",
        ),
        {"x": xs, "dequantized": [steps[i].dequantized for i in order]},
    )


def _zero_table(fmt: str, zero: ZeroCase, ctx: Context) -> None:
    ctx.table(
        f"all-zero tensor of {zero.n_values} values, {fmt}",
        ["approach", "scale", "dequantized", "NaN?"],
        [
            [
                "naive: amax / qmax, then x / scale",
                zero.naive_scale,
                "0/0 → " + ", ".join(zero.naive_dequantized),
                zero.naive_has_nan,
            ],
            [
                "scale clamped to float32 eps (PyTorch observers, torchao)",
                zero.eps_scale,
                "all 0" if zero.eps_dequantized_all_zero else "not all 0",
                False,
            ],
            [
                "labs.quant: stores scale 0 and divides by 1 instead"
                if zero.labs_quant_scale == 0
                else "labs.quant: stores the smallest scale the format has",
                zero.labs_quant_scale,
                "all 0" if zero.labs_quant_dequantized_all_zero else "not all 0",
                zero.labs_quant_has_nan,
            ],
        ],
    )
    ctx.log(
        f"A clamp does not cure NaN: torch.clamp(nan, -qmax, qmax) = {zero.clamp_of_nan}; the zero-scale guard must come before the division."
    )


def _cast_table(c: CastDemo, ctx: Context) -> None:
    ctx.table(
        f"float32 → {c.dtype} (max finite {c.max_finite:g})",
        ["probe", "input", "cast, then clamp", "clamp, then cast"],
        [
            [label, i, a, b]
            for label, i, a, b in zip(
                c.probes, c.inputs, c.cast_then_clamp, c.clamp_then_cast, strict=True
            )
        ]
        + [["Σ stored·(+1, −1, …)", None, c.dot_cast_then_clamp, c.dot_clamp_then_cast]],
    )
    ctx.log(
        f"{c.dtype}: casting first stored {c.cast_then_clamp_nonfinite} non-finite value(s) "
        f"(dot product {c.dot_cast_then_clamp}); clamping first stored "
        f"{c.clamp_then_cast_nonfinite} (dot product {c.dot_clamp_then_cast}). "
        f"Clamping the fp8 tensor afterwards: {c.clamp_on_fp8_tensor}."
    )
    if c.cast_then_clamp_nonfinite == 0:
        ctx.log(
            f"This torch's cast to {c.dtype} saturated to ±{c.max_finite:g}. That is one of two "
            "conversion modes in the OFP8 spec: the other (non-saturating, CUDA's __NV_NOSAT) "
            "turns overflow into NaN for E4M3, which has no infinity. Clamping first gives "
            "the same stored value under either mode."
        )


def _share(part: float, total: float) -> float | None:
    return part / total if total else None
