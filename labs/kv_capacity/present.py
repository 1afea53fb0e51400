"""kv-capacity's page: ``present`` turns what ``run`` returned into events; the
headline tiles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.base import Context
from labs.catalog import memory
from labs.catalog.gpus import GPU, get_gpu
from labs.catalog.memory import gb
from labs.catalog.models import get_model
from labs.kv_capacity.compute import Sizing
from labs.kv_capacity.model import Params, Result
from labs.viz.tiles import Tile, readable, tile


def _memory_figure(r: Result, p: Params, gpu: GPU, ctx: Context) -> None:
    from labs.viz.charts import memory_plot

    capacity = memory.gpu_capacity_bytes(gpu, p.capacity_basis)
    in_use = min(r.allocated_blocks_at_peak * r.block_bytes, max(0, r.pool_bytes_per_gpu))
    memory_plot(
        ctx,
        f"Memory of one {gpu.name}",
        {
            "per GPU": [
                (f"weights ({p.weight_format})", float(r.weights_bytes_per_gpu)),
                ("runtime overhead", p.overhead_gb * memory.BYTES_PER_GB),
                ("KV blocks in use at peak", float(in_use)),
                ("KV pool, unused", float(max(0, r.pool_bytes_per_gpu) - in_use)),
            ]
        },
        capacity,
        caption=f"vLLM takes {p.gpu_memory_utilization:.0%} of the GPU (the rest is kept back); after the weights and "
        f"overhead, {r.pool_gb_per_gpu:.1f} GB hold {r.total_blocks:,} KV blocks of "
        f"{p.block_size} tokens: {r.max_concurrent_requests:,} requests at once. GB = 10⁹ bytes.",
        rest_label="kept back",
    )


def present(sizing: Sizing, p: Params, ctx: Context) -> None:
    """The two pools side by side, the block states, the metrics, one figure, the notes."""
    r, cap, fp8 = sizing.result, sizing.capacity, sizing.fp8
    model, gpu = get_model(r.model), get_gpu(r.gpu)
    _memory_figure(r, p, gpu, ctx)
    ctx.table(
        f"Paged KV cache on {p.tensor_parallel} × {gpu.name}",
        ["", p.kv_dtype + " KV", "fp8 KV"],
        [
            [
                "KV bytes per token per GPU",
                cap.kv_bytes_per_token_per_gpu,
                fp8.kv_bytes_per_token_per_gpu,
            ],
            ["block bytes", cap.block_bytes, fp8.block_bytes],
            ["pool GB per GPU", round(gb(cap.pool_bytes), 3), round(gb(fp8.pool_bytes), 3)],
            ["blocks", cap.total_blocks, fp8.total_blocks],
            ["blocks per request", cap.blocks_per_request, fp8.blocks_per_request],
            ["max concurrent requests", cap.max_concurrent_requests, fp8.max_concurrent_requests],
            [
                "… without prefix sharing",
                cap.max_concurrent_without_sharing,
                fp8.max_concurrent_without_sharing,
            ],
        ],
    )
    allocated, evictable = r.allocated_blocks_at_peak, r.evictable_blocks_after_peak
    ctx.table(
        "Block states",
        ["state", "live blocks", "evictable cached blocks", "free blocks"],
        [
            ["at peak (all requests at full length)", allocated, 0, cap.total_blocks - allocated],
            ["after they finish", 0, evictable, cap.total_blocks - evictable],
        ],
    )
    ctx.metric("kv_bytes_per_token", r.kv_bytes_per_token, "bytes")
    ctx.metric("total_blocks", cap.total_blocks, "blocks")
    ctx.metric("max_concurrent_requests", r.max_concurrent_requests, "requests")
    if r.cache_utilization is not None:
        ctx.metric(
            "cache_utilization", r.cache_utilization, "", "mean share of cache capacity in use"
        )
    ctx.metric("fp8_max_concurrent_requests", fp8.max_concurrent_requests, "requests")

    from labs.viz import charts

    curves = sizing.curves
    xs = next(iter(curves.values()))[0]
    ctx.plot(
        "Concurrent requests vs prompt length",
        charts.line_chart(
            curves,
            title=f"{model.name}, {p.output_tokens} output tokens",
            x_label="prompt tokens",
            y_label="max concurrent requests",
            log_x=True,
        ),
        {"prompt_tokens": xs, **{k: v[1] for k, v in curves.items()}},
        id="concurrency",
    )
    for note in r.notes:
        ctx.log(note)


def headline(r: Mapping[str, Any]) -> list[Tile]:
    """KV bytes per token, the pool, requests at once (and with fp8 KV), queueing."""
    return [
        tile("KV cache per token", r["kv_bytes_per_token"], "bytes", key="kv_bytes_per_token"),
        tile(
            "KV pool per GPU",
            r["pool_gb_per_gpu"],
            "GB",
            key="pool_gb_per_gpu",
            means=f"{r['total_blocks']:,} blocks of {r['block_bytes'] // 1024:,} KiB",
        ),
        tile(
            "Requests at once",
            r["max_concurrent_requests"],
            key="max_concurrent_requests",
            means=f"{r['max_concurrent_without_sharing']:,} without prefix sharing",
        ),
        tile(
            "…with fp8 KV",
            r["fp8_max_concurrent_requests"],
            key="fp8_max_concurrent_requests",
            means=f"{readable(r['fp8_concurrency_gain'])}× as many",
        ),
        tile(
            "Requests wait?",
            "yes" if r["requests_wait"] else "no",
            key="requests_wait",
            means=f"the load needs {readable(r['occupancy_needed'])} in service at once",
            tone="warn" if r["requests_wait"] else "",
        ),
    ]
