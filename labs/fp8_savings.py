"""Lab ``fp8-savings``: what FP8 weights (and an FP8 KV cache) buy at decode time.

Two configurations of the same model on the same GPUs: bf16 weights and KV
cache, and fp8 weights (E4M3, per-channel scales; embeddings and lm_head
stay bf16) with the KV cache in fp8 when ``fp8_kv_cache`` is set.

Roofline assumption, stated: a decode step is bounded by
max(bytes moved / (peak bandwidth × ``bandwidth_efficiency``),
FLOPs / peak tensor throughput) plus a fixed per-step cost that no weight
format changes (launches, sampling, scheduling, all-reduce latency). Bytes
moved per GPU = weights read once (MoE: only routed experts; of the token
embedding table only the one row each sequence looks up, while the lm_head is
read in full) + every cached K/V of every sequence. Activations and logits are
small in decode and are left out. FP8 matmuls run at FP8 tensor-core speed
where the GPU has it, otherwise at bf16/fp16 speed after dequantization
(weight-only FP8).

The lab compares both at the same batch, then at the largest batch each
configuration's free memory admits, and finds the largest batch that meets
the per-token latency target. A configuration whose weights, KV cache and
overhead do not fit at the requested batch gets no step time or throughput
at that batch (None, "does not fit"): it could not run.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from labs.base import Context, Lab, LabResult, NeedsGPU
from labs.catalog import memory, roofline
from labs.catalog.gpus import GPU, get_gpu
from labs.catalog.memory import CapacityBasis, gb
from labs.catalog.models import ModelConfig, get_model
from labs.catalog.params import ContextTokens, ModelOnGpuParams, TensorParallel
from labs.presenters import concepts

MAX_BATCH = 4096
PLOT_POINTS = 24
DOES_NOT_FIT = "does not fit"


class Params(ModelOnGpuParams):
    tensor_parallel: TensorParallel = 2
    batch: int = Field(
        default=8, ge=1, le=MAX_BATCH, description="Sequences decoded together in one step."
    )
    context_tokens: ContextTokens = Field(
        default=4096,
        description="Cached tokens per sequence while decoding (its average length).",
    )
    fp8_kv_cache: bool = Field(
        default=False, description="Also store the KV cache in fp8 in the FP8 configuration."
    )
    latency_target_ms: float = Field(
        default=50.0,
        gt=0,
        le=10_000,
        description="Per-token latency target: the most one decode step may take, ms.",
    )
    bandwidth_efficiency: float = Field(
        default=roofline.DEFAULT_BANDWIDTH_EFFICIENCY,
        gt=0,
        le=1,
        description="Share of peak DRAM bandwidth decode kernels reach.",
    )
    step_overhead_ms: float = Field(
        default=roofline.DEFAULT_STEP_OVERHEAD_MS,
        ge=0,
        le=1000,
        description="Fixed per-step cost in ms (launches, sampling, scheduling, all-reduce latency).",
    )
    overhead_gb: float = Field(
        default=memory.DEFAULT_RUNTIME_OVERHEAD_GB,
        ge=0,
        le=64,
        description="Per-GPU GB (1e9 B) for the CUDA context, workspaces, activations.",
    )
    capacity_basis: CapacityBasis = Field(
        default="datasheet", description="Budget against the datasheet GB or the nvidia-smi total."
    )


class Scenario(BaseModel):
    """One configuration; bytes and GB per GPU, times in ms, throughput in tokens/s.
    The step figures at the requested batch are None when it does not fit."""

    name: str
    weight_format: str
    kv_dtype: str
    compute_dtype: str
    weights_bytes_per_gpu: int
    kv_bytes_per_gpu: int
    total_gb_per_gpu: float
    fits: bool
    step_weight_bytes: int = Field(
        description="Weight bytes one GPU reads per decode step: every weight except the "
        "embedding table (one row per sequence is looked up); the lm_head in full"
    )
    step_kv_bytes: int
    step_ms: float | None = Field(description="Decode step time, ms; None: does not fit")
    bound: str | None = Field(description="memory or compute; None: does not fit")
    tokens_per_s: float | None = Field(description="batch / step time; None: does not fit")
    max_batch: int
    step_ms_at_max_batch: float | None
    tokens_per_s_at_max_batch: float | None
    best_batch_under_target: int
    tokens_per_s_under_target: float


class Result(LabResult):
    model: str
    gpu: str
    tensor_parallel: int
    batch: int
    context_tokens: int
    bf16: Scenario
    fp8: Scenario
    weights_saved_gb_per_gpu: float
    kv_saved_gb_per_gpu: float
    step_ms_saved: float | None = Field(description="None when either does not fit")
    speedup_same_batch: float | None = Field(description="None when either does not fit")
    max_batch_bf16: int
    max_batch_fp8: int
    throughput_gain_at_target: float | None
    notes: list[str]


def _max_batch(p: Params, model: ModelConfig, gpu: GPU, weight_format: str, kv_dtype: str) -> int:
    tp = p.tensor_parallel
    free = (
        memory.gpu_capacity_bytes(gpu, p.capacity_basis)
        - memory.weight_bytes(model, weight_format, tp)
        - round(p.overhead_gb * memory.BYTES_PER_GB)
    )
    per_seq = p.context_tokens * memory.kv_bytes_per_token(model, kv_dtype, tp)
    return max(0, min(MAX_BATCH, free // per_seq))


def _step(
    p: Params, model: ModelConfig, gpu: GPU, weight_format: str, kv_dtype: str, batch: int
) -> roofline.DecodeStep:
    return roofline.decode_step(
        model,
        gpu,
        weight_format=weight_format,
        kv_dtype=kv_dtype,
        tp=p.tensor_parallel,
        batch=batch,
        context_tokens=p.context_tokens,
        bandwidth_efficiency=p.bandwidth_efficiency,
        overhead_ms=p.step_overhead_ms,
    )


def _scenario(
    p: Params, model: ModelConfig, gpu: GPU, name: str, weight_format: str, kv_dtype: str
) -> Scenario:
    tp = p.tensor_parallel
    budget = memory.per_gpu_budget(
        model,
        gpu,
        weight_format=weight_format,
        kv_dtype=kv_dtype,
        kv_tokens=p.batch * p.context_tokens,
        tp=tp,
        overhead_gb=p.overhead_gb,
        basis=p.capacity_basis,
    )
    step = _step(p, model, gpu, weight_format, kv_dtype, p.batch)
    max_b = _max_batch(p, model, gpu, weight_format, kv_dtype)
    at_max = _step(p, model, gpu, weight_format, kv_dtype, max_b) if max_b else None
    # Step time grows with batch, so bisect for the last batch within the target.
    lo, hi = 0, max_b
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if (
            _step(p, model, gpu, weight_format, kv_dtype, mid).seconds * roofline.MS_PER_S
            <= p.latency_target_ms
        ):
            lo = mid
        else:
            hi = mid - 1
    best = lo
    best_step = _step(p, model, gpu, weight_format, kv_dtype, best).seconds if best else None
    return Scenario(
        name=name,
        weight_format=weight_format,
        kv_dtype=kv_dtype,
        compute_dtype=roofline.compute_dtype(gpu, weight_format),
        weights_bytes_per_gpu=budget.weights,
        kv_bytes_per_gpu=budget.kv_cache,
        total_gb_per_gpu=gb(budget.total),
        fits=budget.fits,
        step_weight_bytes=step.weight_bytes,
        step_kv_bytes=step.kv_bytes,
        step_ms=step.seconds * roofline.MS_PER_S if budget.fits else None,
        bound=step.bound if budget.fits else None,
        tokens_per_s=p.batch / step.seconds if budget.fits else None,
        max_batch=max_b,
        step_ms_at_max_batch=at_max.seconds * roofline.MS_PER_S if at_max else None,
        tokens_per_s_at_max_batch=max_b / at_max.seconds if at_max else None,
        best_batch_under_target=best,
        tokens_per_s_under_target=best / best_step if best_step else 0.0,
    )


def _shown(value: float | None, digits: int) -> float | str:
    """A table cell: the rounded value, or "does not fit" for a configuration that cannot run."""
    return DOES_NOT_FIT if value is None else round(value, digits)


@dataclass(frozen=True)
class Savings:
    """The computed result and its figure's curves: per scenario, (batches, step ms)."""

    result: Result
    curves: dict[str, tuple[list[int], list[float]]]


def run(params: Params, ctx: Context) -> Result:
    savings = compare(params)
    present(savings, params, ctx)
    return savings.result


def _notes(p: Params, gpu: GPU, base: Scenario, fp8: Scenario) -> list[str]:
    notes = []
    if not gpu.supports("fp8_e4m3"):
        notes.append(
            f"{gpu.name} has no FP8 tensor cores: FP8 weights halve the bytes but the matmuls run in "
            f"{fp8.compute_dtype} after dequantization (weight-only FP8)."
        )
    for s in (base, fp8):
        if not s.fits:
            notes.append(
                f"{s.name}: batch {p.batch} at {p.context_tokens} tokens does not fit ({s.total_gb_per_gpu:.1f} GB per GPU)."
            )
        if s.max_batch == 0:
            notes.append(
                f"{s.name}: not one sequence of {p.context_tokens} tokens fits after the weights."
            )
    return notes


def _curves(
    p: Params, model: ModelConfig, gpu: GPU, scenarios: tuple[Scenario, ...]
) -> dict[str, tuple[list[int], list[float]]]:
    """Decode step time (ms) at up to PLOT_POINTS batches, each up to what fits."""
    top = max(*(s.max_batch for s in scenarios), p.batch)
    xs = sorted({max(1, round(top * i / PLOT_POINTS)) for i in range(PLOT_POINTS + 1)})
    return {
        s.name: (
            [b for b in xs if b <= s.max_batch],
            [
                _step(p, model, gpu, s.weight_format, s.kv_dtype, b).seconds * roofline.MS_PER_S
                for b in xs
                if b <= s.max_batch
            ],
        )
        for s in scenarios
    }


def compare(params: Params) -> Savings:
    """The same deployment in bf16 and in fp8: memory per GPU, step time and batch."""
    p = params
    model = get_model(p.model)
    gpu = get_gpu(p.gpu)
    base = _scenario(p, model, gpu, "bf16", "bf16", "bf16")
    fp8 = _scenario(p, model, gpu, "fp8", "fp8", "fp8" if p.fp8_kv_cache else "bf16")
    gain = (
        fp8.tokens_per_s_under_target / base.tokens_per_s_under_target
        if base.tokens_per_s_under_target
        else None
    )
    step_ms_saved = speedup = None
    if base.step_ms is not None and fp8.step_ms is not None:
        step_ms_saved = base.step_ms - fp8.step_ms
        speedup = base.step_ms / fp8.step_ms
    result = Result(
        model=model.id,
        gpu=gpu.id,
        tensor_parallel=p.tensor_parallel,
        batch=p.batch,
        context_tokens=p.context_tokens,
        bf16=base,
        fp8=fp8,
        weights_saved_gb_per_gpu=gb(base.weights_bytes_per_gpu - fp8.weights_bytes_per_gpu),
        kv_saved_gb_per_gpu=gb(base.kv_bytes_per_gpu - fp8.kv_bytes_per_gpu),
        step_ms_saved=step_ms_saved,
        speedup_same_batch=speedup,
        max_batch_bf16=base.max_batch,
        max_batch_fp8=fp8.max_batch,
        throughput_gain_at_target=gain,
        notes=_notes(p, gpu, base, fp8),
    )
    return Savings(result, _curves(p, model, gpu, (base, fp8)))


def present(savings: Savings, p: Params, ctx: Context) -> None:
    """The side-by-side table, the headline metrics, the step-time figure and the notes."""
    r = savings.result
    model = get_model(r.model)
    base, fp8 = r.bf16, r.fp8
    ctx.progress(0.1, "bf16 baseline")
    ctx.progress(0.4, "fp8")
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
    ctx.progress(1.0, "done")


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


LAB = Lab(
    id="fp8-savings",
    title="FP8 savings: bytes, step time and batch",
    summary="Compare bf16 and FP8 weights (optionally an FP8 KV cache) for a model on a GPU: bytes "
    "saved, memory-bound decode step time at the same batch, then the larger batch the freed "
    "memory admits, against a latency target.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("weights_saved_gb_per_gpu", "GB"),
        ("speedup_same_batch", "×"),
        ("max_batch_bf16", "sequences"),
        ("max_batch_fp8", "sequences"),
    ),
    concept=concepts.fp8_savings,
)
