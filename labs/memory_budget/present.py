"""memory-budget's page: ``present`` turns what ``run`` returned into events; the
headline tiles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.base import Context
from labs.catalog.gpus import get_gpu
from labs.catalog.memory import gb, gib
from labs.catalog.models import get_model
from labs.memory_budget.model import Params, Result
from labs.viz.tiles import Tile, readable, tile


def _memory_figure(r: Result, params: Params, ctx: Context) -> None:
    from labs.viz.charts import memory_plot

    gpu = get_gpu(r.gpu)
    verdict = "fits" if r.fits else f"does not fit (over by {-r.headroom_gb_per_gpu:.1f} GB)"
    memory_plot(
        ctx,
        f"Does it fit? One {gpu.name}, TP {r.tensor_parallel}",
        {
            f"per GPU, TP {r.tensor_parallel}": [
                (f"weights ({params.weight_format})", r.weights_bytes_per_gpu),
                (f"KV cache ({params.kv_dtype})", r.kv_cache_bytes_per_gpu),
                ("runtime overhead", r.overhead_bytes_per_gpu),
            ]
        },
        r.gpu_capacity_bytes,
        caption=f"Per GPU: {r.total_gb_per_gpu:.1f} GB needed against {r.gpu_capacity_gb:.0f} GB "
        f"on one {gpu.name}: it {verdict}. KV cache for {params.batch} × "
        f"{params.context_tokens} tokens. GB = 10⁹ bytes.",
    )


def present(r: Result, params: Params, ctx: Context) -> None:
    """The weights and per-GPU tables, the headline metrics, one chart and the verdict."""
    model, gpu, tp = get_model(r.model), get_gpu(r.gpu), r.tensor_parallel
    _memory_figure(r, params, ctx)
    ctx.table(
        "Weights by tensor kind",
        ["tensor kind", "parameters", "sharding", "GB total", f"GB per GPU (TP {tp})"],
        [
            [
                k.kind,
                k.params,
                k.sharding,
                round(gb(k.bytes_total), 3),
                round(gb(k.bytes_per_gpu), 3),
            ]
            for k in r.weights_by_kind
        ],
    )
    ctx.table(
        f"Per-GPU budget on {gpu.name} (GB = 1e9 B, GiB = 2^30 B)",
        ["item", "bytes", "GB", "GiB"],
        [
            [name, n, round(gb(n), 3), round(gib(n), 3)]
            for name, n in (
                ("weights", r.weights_bytes_per_gpu),
                (
                    f"KV cache ({params.batch} × {params.context_tokens} tokens)",
                    r.kv_cache_bytes_per_gpu,
                ),
                ("runtime overhead", r.overhead_bytes_per_gpu),
                ("total", r.total_bytes_per_gpu),
                (f"capacity ({params.capacity_basis})", r.gpu_capacity_bytes),
                ("headroom", r.headroom_bytes_per_gpu),
            )
        ],
    )
    ctx.metric("weights_gb", r.weights_gb, "GB", "weights, whole model")
    ctx.metric("kv_bytes_per_token", r.kv_bytes_per_token, "bytes")
    ctx.metric("total_gb_per_gpu", r.total_gb_per_gpu, "GB", "needed per GPU")
    ctx.metric("headroom_gb_per_gpu", r.headroom_gb_per_gpu, "GB", "headroom per GPU")
    if r.min_tensor_parallel is not None:
        ctx.metric("min_tensor_parallel", r.min_tensor_parallel, "GPUs", "smallest TP that fits")

    from labs.viz import charts

    labels = [k.kind for k in r.weights_by_kind] + ["KV cache", "overhead"]
    values = [gb(k.bytes_per_gpu) for k in r.weights_by_kind] + [
        gb(r.kv_cache_bytes_per_gpu),
        gb(r.overhead_bytes_per_gpu),
    ]
    ctx.plot(
        f"Bytes per GPU by tensor kind ({model.name}, {params.weight_format}, TP {tp})",
        charts.bar_chart(labels, values, title="Memory per GPU", value_label="GB (1e9 bytes)"),
        {"labels": labels, "gb": values, "capacity_gb": r.gpu_capacity_gb},
        id="bytes-by-kind",
    )
    for note in r.notes:
        ctx.log(note)
    verdict = "fits" if r.fits else "does not fit"
    ctx.log(
        f"{model.name} {verdict} on {tp} × {gpu.name}: {r.total_gb_per_gpu:.2f} GB needed per "
        f"GPU of {r.gpu_capacity_gb:.2f} GB ({r.headroom_gb_per_gpu:+.2f} GB headroom)."
    )


def _fit_tone(headroom: float) -> str:
    return "warn" if headroom < 0 else ""


def headline(r: Mapping[str, Any]) -> list[Tile]:
    """Weights, what one GPU needs against what it has, headroom, and the TP that fits."""
    tp = r["tensor_parallel"]
    fits = "fits" if r["fits"] else "does not fit"
    return [
        tile(
            "Weights",
            r["weights_gb"],
            "GB",
            key="weights_gb",
            means=f"{r['param_count'] / 1e9:.1f} B parameters in {r['weight_format']}",
        ),
        tile(
            "Needed per GPU",
            r["total_gb_per_gpu"],
            "GB",
            key="total_gb_per_gpu",
            means=f"weights, KV cache and overhead at TP {tp}",
        ),
        tile(
            "Headroom per GPU",
            r["headroom_gb_per_gpu"],
            "GB",
            key="headroom_gb_per_gpu",
            means=f"{fits} in {readable(r['gpu_capacity_gb'])} GB ({r['gpu']})",
            tone=_fit_tone(r["headroom_gb_per_gpu"]),
        ),
        tile(
            "KV cache per token",
            r["kv_bytes_per_token"],
            "bytes",
            key="kv_bytes_per_token",
            means=f"every layer's K and V in {r['kv_dtype']}",
        ),
        tile(
            "Smallest TP that fits",
            r["min_tensor_parallel"],
            "GPUs",
            key="min_tensor_parallel",
            means="tensor-parallel GPUs sharing the weights",
        ),
    ]
