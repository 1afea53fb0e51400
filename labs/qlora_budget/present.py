"""qlora-budget's page: ``present`` turns what ``run`` returned into events; the
headline tiles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.base import Context
from labs.catalog.gpus import get_gpu
from labs.catalog.memory import gb, gib
from labs.catalog.models import get_model
from labs.qlora_budget.model import MEMORY_BAR_PARTS, Params, Result
from labs.viz.tiles import Tile, readable, tile


def _memory_figure(r: Result, gpu_name: str, ctx: Context) -> None:
    from labs.viz.charts import memory_plot

    parts = sorted(r.components, key=lambda c: c.bytes, reverse=True)
    shown = [(c.name, float(c.bytes)) for c in parts[:MEMORY_BAR_PARTS]]
    rest = sum(c.bytes for c in parts[MEMORY_BAR_PARTS:])
    verdict = "fits" if r.fits else f"does not fit (over by {-r.headroom_gb:.1f} GB)"
    memory_plot(
        ctx,
        f"Does QLoRA fit on one {gpu_name}?",
        {"training step": shown + ([("other", float(rest))] if rest else [])},
        r.gpu_capacity_bytes,
        caption=f"{r.total_gb:.1f} GB needed against {r.gpu_capacity_gb:.0f} GB: it {verdict}. "
        "The table below lists every component. GB = 10⁹ bytes.",
    )


def present(r: Result, p: Params, ctx: Context) -> None:
    """The memory table, the headline metrics, one bar chart and the notes."""
    model, gpu = get_model(r.model), get_gpu(r.gpu)
    total, capacity = r.total_bytes, r.gpu_capacity_bytes
    _memory_figure(r, gpu.name, ctx)
    ctx.table(
        f"QLoRA memory on {gpu.name} (GB = 1e9 B, GiB = 2^30 B)",
        ["component", "bytes", "GB", "GiB", "detail"],
        [
            [c.name, c.bytes, round(gb(c.bytes), 3), round(gib(c.bytes), 3), c.detail]
            for c in r.components
        ]
        + [
            ["total", total, round(gb(total), 3), round(gib(total), 3), ""],
            [
                f"capacity ({p.capacity_basis})",
                capacity,
                round(gb(capacity), 3),
                round(gib(capacity), 3),
                "",
            ],
        ],
    )
    ctx.metric("trainable_params", r.trainable_params, "params", "LoRA parameters")
    ctx.metric("base_weights_gb", r.base_weights_gb, "GB", "frozen base weights")
    ctx.metric("total_gb", r.total_gb, "GB", "total needed")
    ctx.metric("headroom_gb", r.headroom_gb, "GB", "headroom")
    ctx.metric("max_micro_batch", r.max_micro_batch, "sequences", "largest micro-batch that fits")

    from labs.viz import charts

    ctx.plot(
        f"QLoRA memory by component ({model.name}, r={p.rank})",
        charts.bar_chart(
            [c.name for c in r.components],
            [gb(c.bytes) for c in r.components],
            title=f"Total {gb(total):.1f} GB of {gb(capacity):.1f} GB",
            value_label="GB (1e9 bytes)",
        ),
        {"components": [c.name for c in r.components], "gb": [gb(c.bytes) for c in r.components]},
        id="components",
    )
    for note in r.notes:
        ctx.log(note)
    ctx.log(
        f"{model.name} QLoRA on {gpu.name}: {r.verdict} ({gb(total):.2f} of {gb(capacity):.2f} GB)."
    )


def _fit_tone(headroom: float) -> str:
    return "warn" if headroom < 0 else ""


def headline(r: Mapping[str, Any]) -> list[Tile]:
    """What trains, what the frozen base costs, the total against the GPU, micro-batch."""
    return [
        tile(
            "Trainable parameters",
            r["trainable_params"],
            key="trainable_params",
            means=f"{readable(r['trainable_percent'])} % of the model (LoRA adapters)",
        ),
        tile(
            "Base weights",
            r["base_weights_gb"],
            "GB",
            key="base_weights_gb",
            means=f"{readable(r['base_bits_per_quantized_param'])} bits per quantized weight",
        ),
        tile(
            "Total needed",
            r["total_gb"],
            "GB",
            key="total_gb",
            means=f"of {readable(r['gpu_capacity_gb'])} GB on the {r['gpu']}",
        ),
        tile(
            "Headroom",
            r["headroom_gb"],
            "GB",
            key="headroom_gb",
            means=r["verdict"],
            tone=_fit_tone(r["headroom_gb"]),
        ),
        tile("Largest micro-batch (sequences)", r["max_micro_batch"], key="max_micro_batch"),
    ]
