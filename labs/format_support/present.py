"""format-support's page: every GPU's path side by side, the thresholds with their
sources, the bytes and speed bounds, and the verdict in words."""

from __future__ import annotations

from labs.base import Context
from labs.catalog.kernel_paths import PATH_MEANING, RULES
from labs.catalog.models import get_model
from labs.format_support.compute import Assessment
from labs.format_support.model import Params, Result


def present(assessment: Assessment, params: Params, ctx: Context) -> None:
    """Emit the run's events, in the order the run page shows them."""
    r = assessment.result
    for line in assessment.detection_log:
        ctx.log(line)
    _tables(r, ctx)
    ctx.metric("file_bits_per_param", r.file_bits_per_param, "bits", "stored bits per parameter")
    ctx.metric(
        "resident_bits_per_param",
        r.resident_bits_per_param,
        "bits",
        f"bits per parameter on {r.gpu_name}",
    )
    ctx.metric(
        "decode_bytes_ratio",
        r.decode_bytes_ratio,
        "× bf16",
        "decode weight bytes vs bf16, per projection matrix",
    )
    ctx.metric(
        "decode_speedup_bound_whole_model",
        r.decode_speedup_bound_whole_model,
        "× bf16",
        "memory-bound decode speedup over bf16, whole model",
    )
    if r.compute_speedup is not None:
        ctx.metric("compute_speedup", r.compute_speedup, "× 16-bit", "matmul peak vs 16-bit")
    _plot(r, ctx)
    ctx.log(r.verdict)
    ctx.log(f"Meaning: {PATH_MEANING[r.path]}.")
    ctx.log(f"Speed: {r.speed}")
    ctx.log(f"Memory: {r.memory}")
    for note in r.notes:
        ctx.log(note)


def _tables(r: Result, ctx: Context) -> None:
    model_name = get_model(r.model).name
    ctx.table(
        f"{r.format_title}: kernel path on each GPU",
        [
            "GPU",
            "sm",
            "path",
            "kernel",
            "matmul in",
            "bits/param resident (projection matrix)",
            f"{model_name} weights (GB)",
            "fits (weights only)",
            "batch-1 decode bound (tokens/s)",
            "matmul peak vs 16-bit",
        ],
        [
            [
                g.gpu,
                g.compute_capability,
                g.path,
                g.kernel,
                g.compute,
                g.resident_bits_per_param,
                round(g.weights_gb, 2),
                g.fits_weights_only,
                None
                if g.decode_tokens_per_s_bound is None
                else round(g.decode_tokens_per_s_bound, 1),
                None if g.compute_speedup is None else round(g.compute_speedup, 2),
            ]
            for g in r.per_gpu
        ],
    )
    ctx.table(
        f"Capability thresholds for {r.format}",
        ["from compute capability", "path", "kernel", "note", "sources"],
        [
            [
                f"{x.min_sm // 10}.{x.min_sm % 10}",
                x.path,
                x.kernel,
                x.note,
                "; ".join(s.url for s in x.sources),
            ]
            for x in RULES[r.format]
        ],
    )


def _plot(r: Result, ctx: Context) -> None:
    from labs.viz import charts

    model_name = get_model(r.model).name
    plotted = [g for g in r.per_gpu if g.decode_tokens_per_s_bound is not None]
    labels = [f"{g.gpu} ({g.path})" for g in plotted]
    values = [g.decode_tokens_per_s_bound or 0.0 for g in plotted]
    ctx.plot(
        f"Batch-1 decode upper bound for {model_name} in {r.format}, by GPU",
        charts.bar_chart(
            labels,
            values,
            title=f"{model_name}, {r.format}",
            value_label="tokens/s (peak bandwidth ÷ weight bytes)",
        ),
        {"labels": labels, "tokens_per_s": values},
        id="decode-bound",
    )
