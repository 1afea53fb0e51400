"""fp8-savings's page: ``present`` turns what ``run`` returned into events."""

from __future__ import annotations

from labs.base import Context
from labs.catalog.gpus import get_gpu
from labs.catalog.memory import gb
from labs.catalog.models import get_model
from labs.fp8_savings.compute import Savings
from labs.fp8_savings.model import DOES_NOT_FIT, Params, Result


def _shown(value: float | None, digits: int) -> float | str:
    """A table cell: the rounded value, or "does not fit" for a configuration that cannot run."""
    return DOES_NOT_FIT if value is None else round(value, digits)


def present(savings: Savings, p: Params, ctx: Context) -> None:
    """The side-by-side table, the headline metrics, the step-time figure and the notes."""
    r = savings.result
    model = get_model(r.model)
    base, fp8 = r.bf16, r.fp8
    _table(r, p, ctx)
    ctx.metric("weights_saved_gb_per_gpu", r.weights_saved_gb_per_gpu, "GB")
    if r.speedup_same_batch is not None:
        ctx.metric("speedup_same_batch", r.speedup_same_batch, "×")
    ctx.metric("max_batch_bf16", base.max_batch, "sequences")
    ctx.metric("max_batch_fp8", fp8.max_batch, "sequences")
    if r.throughput_gain_at_target is not None:
        ctx.metric("throughput_gain_at_target", r.throughput_gain_at_target, "×")

    from labs.viz import charts

    ctx.plot(
        "Decode step time vs batch (up to the largest batch that fits)",
        charts.line_chart(
            savings.curves,
            title=f"{model.name}, {p.context_tokens} cached tokens per sequence",
            x_label="batch (sequences)",
            y_label="step time (ms per token)",
            hlines={"latency target": p.latency_target_ms},
        ),
        {name: {"batch": v[0], "step_ms": v[1]} for name, v in savings.curves.items()},
        id="step-time",
    )
    for note in r.notes:
        ctx.log(note)
    if base.step_ms is not None and fp8.step_ms is not None:
        same = (
            f"Same batch {p.batch}: {base.step_ms:.1f} ms → {fp8.step_ms:.1f} ms per step "
            f"({r.speedup_same_batch:.2f}×)."
        )
    else:
        steps = ", ".join(
            f"{s.name} {DOES_NOT_FIT if s.step_ms is None else f'{s.step_ms:.1f} ms per step'}"
            for s in (base, fp8)
        )
        same = f"Same batch {p.batch}: {steps}."
    ctx.log(f"{same} Largest batch that fits: {base.max_batch} → {fp8.max_batch}.")


def _table(r: Result, p: Params, ctx: Context) -> None:
    model, gpu = get_model(r.model), get_gpu(r.gpu)
    base, fp8 = r.bf16, r.fp8
    ctx.table(
        f"{model.name} on {p.tensor_parallel} × {gpu.name}, batch {p.batch}, {p.context_tokens} cached tokens",
        ["", "bf16", "fp8"],
        [
            [
                "weights GB per GPU",
                round(gb(base.weights_bytes_per_gpu), 3),
                round(gb(fp8.weights_bytes_per_gpu), 3),
            ],
            [
                "KV cache GB per GPU",
                round(gb(base.kv_bytes_per_gpu), 3),
                round(gb(fp8.kv_bytes_per_gpu), 3),
            ],
            ["fits", base.fits, fp8.fits],
            [
                "weight bytes read per step (GB)",
                round(gb(base.step_weight_bytes), 3),
                round(gb(fp8.step_weight_bytes), 3),
            ],
            [
                "KV bytes read per step (GB)",
                round(gb(base.step_kv_bytes), 3),
                round(gb(fp8.step_kv_bytes), 3),
            ],
            ["fixed step cost (ms)", p.step_overhead_ms, p.step_overhead_ms],
            ["step time (ms)", *(_shown(s.step_ms, 2) for s in (base, fp8))],
            ["bound by", *(s.bound or DOES_NOT_FIT for s in (base, fp8))],
            ["tokens/s at this batch", *(_shown(s.tokens_per_s, 1) for s in (base, fp8))],
            ["largest batch that fits", base.max_batch, fp8.max_batch],
            [
                f"largest batch ≤ {p.latency_target_ms:g} ms/step",
                base.best_batch_under_target,
                fp8.best_batch_under_target,
            ],
            [
                "tokens/s under the target",
                round(base.tokens_per_s_under_target, 1),
                round(fp8.tokens_per_s_under_target, 1),
            ],
        ],
    )
