"""memory-budget's computation: what ``run`` does, emitting its progress."""

from __future__ import annotations

from labs.base import Context
from labs.catalog import memory
from labs.catalog.gpus import get_gpu
from labs.catalog.memory import gb, gib
from labs.catalog.models import TPRule, get_model, param_counts, tensor_groups
from labs.memory_budget.model import Params, Result, TensorBytes


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
    ctx.progress(0.1, "counting parameters and finding the tensor-parallel size that fits")
    return budget(params)


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
