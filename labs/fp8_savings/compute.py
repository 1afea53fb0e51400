"""fp8-savings's computation: what ``run`` does, emitting its progress."""

from __future__ import annotations

from dataclasses import dataclass

from labs.base import Context
from labs.catalog import memory, roofline
from labs.catalog.gpus import GPU, get_gpu
from labs.catalog.memory import gb
from labs.catalog.models import ModelConfig, get_model
from labs.fp8_savings.model import MAX_BATCH, PLOT_POINTS, Params, Result, Scenario


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


@dataclass(frozen=True)
class Savings:
    """The computed result and its figure's curves: per scenario, (batches, step ms)."""

    result: Result
    curves: dict[str, tuple[list[int], list[float]]]


def run(params: Params, ctx: Context) -> Savings:
    ctx.progress(0.1, "bf16 baseline and fp8")
    return compare(params)


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
