"""Lab ``memory-budget``: will this model fit on these GPUs, and with how much room?

Weights by tensor kind (from the real config), the KV cache for a batch at a
context length, and a runtime allowance, per GPU under tensor parallelism,
against the card's capacity. Accounting rules: ``labs.catalog.memory``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from labs.base import Context, Lab, LabResult, NeedsGPU
from labs.catalog import memory
from labs.catalog.formats import KvDtype, WeightFormatKey
from labs.catalog.gpus import get_gpu
from labs.catalog.memory import CapacityBasis, gb, gib
from labs.catalog.models import TPRule, get_model, param_counts, tensor_groups
from labs.catalog.params import ContextTokens, ModelOnGpuParams, TensorParallel
from labs.presenters import concepts, headlines

MAX_BATCH = 4096


class Params(ModelOnGpuParams):
    weight_format: WeightFormatKey = Field(
        default="bf16",
        description="How weights are stored: a dtype (fp32, bf16, fp16) for every tensor, or a "
        "quantization format for the projection matrices (embeddings and norms stay bf16).",
    )
    kv_dtype: KvDtype = Field(default="bf16", description="Element type of the KV cache.")
    context_tokens: ContextTokens = Field(
        default=8192,
        description="Tokens cached per sequence (prompt + generated), at most the model's context.",
    )
    batch: int = Field(
        default=1, ge=1, le=MAX_BATCH, description="Sequences held in the KV cache at once."
    )
    tensor_parallel: TensorParallel = 1
    overhead_gb: float = Field(
        default=memory.DEFAULT_RUNTIME_OVERHEAD_GB,
        ge=0,
        le=64,
        description="Per-GPU allowance in GB (1e9 B) for the CUDA context, cuBLAS/NCCL workspaces, "
        "CUDA graphs, activations and allocator fragmentation.",
    )
    capacity_basis: CapacityBasis = Field(
        default="datasheet",
        description="GPU capacity to budget against: the datasheet figure read as decimal GB, or "
        "the total nvidia-smi reports (MiB).",
    )


class TensorBytes(BaseModel):
    kind: str
    params: int
    sharding: str
    bytes_total: int
    bytes_per_gpu: int


class Result(LabResult):
    model: str
    gpu: str
    weight_format: str
    kv_dtype: str
    tensor_parallel: int
    capacity_basis: str
    param_count: int
    weights_bytes: int
    weights_gb: float
    weights_by_kind: list[TensorBytes]
    weights_bytes_per_gpu: int
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: int
    kv_cache_bytes_per_gpu: int
    overhead_bytes_per_gpu: int
    total_bytes_per_gpu: int
    total_gb_per_gpu: float
    total_gib_per_gpu: float
    gpu_capacity_bytes: int
    gpu_capacity_gb: float
    gpu_capacity_gib: float
    headroom_bytes_per_gpu: int
    headroom_gb_per_gpu: float
    headroom_gib_per_gpu: float
    fits: bool
    max_kv_tokens_per_gpu: int
    min_tensor_parallel: int | None = Field(
        description="Smallest tensor-parallel size that is valid for the model, fits every "
        "GPU and splits row-parallel weights on scale-block boundaries; None: none up to "
        f"{memory.MAX_TENSOR_PARALLEL}"
    )
    notes: list[str]


def _sharding(rule: TPRule, kv_heads: bool, model_kv_heads: int, tp: int) -> str:
    if tp == 1:
        return "whole"
    if rule is TPRule.replicated:
        return "replicated"
    if kv_heads and tp > model_kv_heads:
        return f"KV heads replicated ×{tp // model_kv_heads}"
    return {"column": "split by rows", "row": "split by columns", "vocab": "split by vocab"}[
        rule.value
    ]


def run(params: Params, ctx: Context) -> Result:
    result = budget(params)
    present(result, params, ctx)
    return result


def budget(params: Params) -> Result:
    """Weights by tensor kind, KV cache and overhead per GPU, and the smallest
    tensor-parallel size that fits."""
    model = get_model(params.model)
    gpu = get_gpu(params.gpu)
    tp = params.tensor_parallel
    counts = param_counts(model)
    total_by_kind = memory.weight_bytes_by_kind(model, params.weight_format, 1)
    per_gpu_by_kind = memory.weight_bytes_by_kind(model, params.weight_format, tp)
    rows = [
        TensorBytes(
            kind=g.kind,
            params=counts[g.kind],
            sharding=_sharding(g.tp, g.kv_heads, model.num_kv_heads, tp),
            bytes_total=total_by_kind[g.kind],
            bytes_per_gpu=per_gpu_by_kind[g.kind],
        )
        for g in tensor_groups(model)
    ]
    kv_tokens = params.batch * params.context_tokens
    per_gpu = memory.per_gpu_budget(
        model,
        gpu,
        weight_format=params.weight_format,
        kv_dtype=params.kv_dtype,
        kv_tokens=kv_tokens,
        tp=tp,
        overhead_gb=params.overhead_gb,
        basis=params.capacity_basis,
    )
    kv_per_token_gpu = memory.kv_bytes_per_token(model, params.kv_dtype, tp)
    free_for_kv = per_gpu.capacity - per_gpu.weights - per_gpu.overhead

    def smallest_tp(block_aligned: bool) -> int | None:
        return memory.min_fitting_tensor_parallel(
            model,
            gpu,
            weight_format=params.weight_format,
            kv_dtype=params.kv_dtype,
            kv_tokens=kv_tokens,
            overhead_gb=params.overhead_gb,
            basis=params.capacity_basis,
            block_aligned=block_aligned,
        )

    min_tp, min_tp_by_bytes = smallest_tp(True), smallest_tp(False)
    weights_total = memory.weight_bytes(model, params.weight_format)
    return Result(
        model=model.id,
        gpu=gpu.id,
        weight_format=params.weight_format,
        kv_dtype=params.kv_dtype,
        tensor_parallel=tp,
        capacity_basis=params.capacity_basis,
        param_count=sum(counts.values()),
        weights_bytes=weights_total,
        weights_gb=gb(weights_total),
        weights_by_kind=rows,
        weights_bytes_per_gpu=per_gpu.weights,
        kv_bytes_per_token=memory.kv_bytes_per_token(model, params.kv_dtype),
        kv_bytes_per_token_per_gpu=kv_per_token_gpu,
        kv_cache_bytes_per_gpu=per_gpu.kv_cache,
        overhead_bytes_per_gpu=per_gpu.overhead,
        total_bytes_per_gpu=per_gpu.total,
        total_gb_per_gpu=gb(per_gpu.total),
        total_gib_per_gpu=gib(per_gpu.total),
        gpu_capacity_bytes=per_gpu.capacity,
        gpu_capacity_gb=gb(per_gpu.capacity),
        gpu_capacity_gib=gib(per_gpu.capacity),
        headroom_bytes_per_gpu=per_gpu.headroom,
        headroom_gb_per_gpu=gb(per_gpu.headroom),
        headroom_gib_per_gpu=gib(per_gpu.headroom),
        fits=per_gpu.fits,
        max_kv_tokens_per_gpu=max(0, free_for_kv // kv_per_token_gpu),
        min_tensor_parallel=min_tp,
        notes=_notes(params, per_gpu.fits, min_tp, min_tp_by_bytes),
    )


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
    ctx.progress(0.1, "counting parameters")
    ctx.progress(0.5, "finding the smallest tensor-parallel size that fits")
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
    )
    for note in r.notes:
        ctx.log(note)
    verdict = "fits" if r.fits else "does not fit"
    ctx.log(
        f"{model.name} {verdict} on {tp} × {gpu.name}: {r.total_gb_per_gpu:.2f} GB needed per "
        f"GPU of {r.gpu_capacity_gb:.2f} GB ({r.headroom_gb_per_gpu:+.2f} GB headroom)."
    )
    ctx.progress(1.0, "done")


def _notes(
    params: Params, fits: bool, min_tp: int | None, min_tp_by_bytes: int | None
) -> list[str]:
    model = get_model(params.model)
    gpu = get_gpu(params.gpu)
    tp = params.tensor_parallel
    notes: list[str] = []
    if tp > model.num_kv_heads:
        notes.append(
            f"TP {tp} exceeds the {model.num_kv_heads} KV heads: each GPU keeps one KV head, "
            f"replicated {tp // model.num_kv_heads}×, so KV cache per GPU stops shrinking."
        )
    notes += memory.block_alignment_problems(model, params.weight_format, tp)
    native = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4", "mxfp4": "mxfp4", "bf16": "bf16"}
    needed = native.get(params.weight_format)
    if needed and not gpu.supports(needed):
        notes.append(
            f"{gpu.name} has no {needed} tensor cores: {params.weight_format} weights are stored "
            "as budgeted but must be converted (weight-only kernels or emulation) to compute."
        )
    if params.kv_dtype == "bf16" and not gpu.supports("bf16"):
        notes.append(f"{gpu.name} has no bf16: use an fp16 KV cache (same bytes).")
    if min_tp_by_bytes is not None and min_tp != min_tp_by_bytes:
        problems = memory.block_alignment_problems(model, params.weight_format, min_tp_by_bytes)
        instead = (
            f"the smallest that fits and splits them on block boundaries is {min_tp}"
            if min_tp is not None
            else f"no size up to {memory.MAX_TENSOR_PARALLEL} both fits and splits them on "
            "block boundaries"
        )
        notes.append(
            f"Block alignment, not bytes, sets the tensor-parallel size: TP {min_tp_by_bytes} "
            f"would hold the bytes, but {problems[0]}, which {params.weight_format} kernels "
            f"reject; {instead}."
        )
    if not fits:
        if min_tp is None and min_tp_by_bytes is None:
            notes.append(
                f"No tensor-parallel size up to {memory.MAX_TENSOR_PARALLEL} fits these settings."
            )
        elif min_tp is not None and min_tp > tp:
            notes.append(f"The smallest tensor-parallel size that fits is {min_tp}.")
    return notes


LAB = Lab(
    id="memory-budget",
    title="Memory budget: weights, KV cache and overhead per GPU",
    summary="Count a real model's bytes by tensor kind, add the KV cache for your batch and context "
    "and a runtime allowance, split them across tensor-parallel GPUs, and see whether it fits.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("weights_gb", "GB"),
        ("kv_bytes_per_token", "bytes"),
        ("total_gb_per_gpu", "GB"),
        ("headroom_gb_per_gpu", "GB"),
        ("min_tensor_parallel", "GPUs"),
    ),
    headline=headlines.memory_budget,
    concept=concepts.memory_budget,
)
