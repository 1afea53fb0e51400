"""kv-capacity's computation: what ``run`` does, emitting its progress."""

from __future__ import annotations

import math
from dataclasses import dataclass

from labs.base import Context
from labs.catalog import memory, roofline
from labs.catalog.gpus import GPU, get_gpu
from labs.catalog.memory import gb, gib
from labs.catalog.models import ModelConfig, get_model
from labs.kv_capacity.model import (
    HIGH_UTILIZATION,
    ONE_BYTE_KV,
    PLOT_PROMPT_POINTS,
    Capacity,
    Params,
    Result,
)


def _capacity(
    p: Params, model: ModelConfig, gpu: GPU, kv_dtype: str, prompt_tokens: int
) -> Capacity:
    tp = p.tensor_parallel
    per_token = memory.kv_bytes_per_token(model, kv_dtype, tp)
    block_bytes = per_token * p.block_size
    usable = math.floor(memory.gpu_capacity_bytes(gpu, p.capacity_basis) * p.gpu_memory_utilization)
    pool = (
        usable
        - memory.weight_bytes(model, p.weight_format, tp)
        - round(p.overhead_gb * memory.BYTES_PER_GB)
    )
    total_blocks = max(0, pool) // block_bytes
    tokens = prompt_tokens + p.output_tokens
    per_request = math.ceil(tokens / p.block_size)
    prefix = min(p.shared_prefix_tokens, prompt_tokens)
    shared = prefix // p.block_size if p.prefix_caching else 0
    private = per_request - shared
    return Capacity(
        kv_dtype=kv_dtype,
        kv_bytes_per_token_per_gpu=per_token,
        block_bytes=block_bytes,
        pool_bytes=pool,
        total_blocks=total_blocks,
        blocks_per_request=per_request,
        shared_blocks=shared,
        private_blocks_per_request=private,
        max_concurrent_requests=max(0, total_blocks - shared) // private,
        max_concurrent_without_sharing=total_blocks // per_request,
    )


def _request_seconds(
    p: Params, model: ModelConfig, gpu: GPU, concurrency: int
) -> tuple[float, float]:
    """(seconds a request is in service, decode step seconds) at ``concurrency`` sequences."""
    step = roofline.decode_step(
        model,
        gpu,
        weight_format=p.weight_format,
        kv_dtype=p.kv_dtype,
        tp=p.tensor_parallel,
        batch=max(1, concurrency),
        context_tokens=p.prompt_tokens + p.output_tokens // 2,  # mean length while decoding
    ).seconds
    return (p.request_seconds or p.output_tokens * step), step


@dataclass(frozen=True)
class Sizing:
    """The computed result, the block pools it compares, and its figure's curves."""

    result: Result
    capacity: Capacity  # in the requested KV dtype
    fp8: Capacity  # the same pool with a one-byte KV cache
    curves: dict[str, tuple[list[int], list[int]]]  # per KV dtype: prompt tokens, requests


def run(params: Params, ctx: Context) -> Sizing:
    ctx.progress(0.1, "sizing the block pool and the time in service")
    return size(params)


def _notes(p: Params, gpu: GPU, n: int, occupancy: float, utilization: float | None) -> list[str]:
    notes = []
    if n == 0:
        notes.append(
            "Not one request fits: the pool after weights is smaller than one request's blocks."
        )
    if utilization is None or utilization > 1:
        notes.append(
            f"The load needs {occupancy:.0f} requests in service but the cache holds {n}: "
            "requests queue for free blocks (or get preempted and recomputed)."
        )
    elif utilization > HIGH_UTILIZATION:
        notes.append(
            f"The cache is {utilization:.0%} occupied on average: bursts will wait for blocks."
        )
    if p.shared_prefix_tokens and p.shared_prefix_tokens % p.block_size and p.prefix_caching:
        notes.append(
            f"Only full blocks are shared: {p.shared_prefix_tokens % p.block_size} prefix tokens "
            "in the last partial block are stored per request."
        )
    if p.kv_dtype != ONE_BYTE_KV and not gpu.supports("fp8_e4m3"):
        notes.append(
            f"{gpu.name} has no FP8 tensor cores; an fp8 KV cache is stored in 8 bits and upcast to compute."
        )
    return notes


def _curves(p: Params, model: ModelConfig, gpu: GPU) -> dict[str, tuple[list[int], list[int]]]:
    xs = [x for x in PLOT_PROMPT_POINTS if x + p.output_tokens <= model.max_context]
    return {
        f"{kv} KV": (xs, [_capacity(p, model, gpu, kv, x).max_concurrent_requests for x in xs])
        for kv in dict.fromkeys((p.kv_dtype, ONE_BYTE_KV))
    }


def size(params: Params) -> Sizing:
    """The block pool, how many requests it holds, and whether the load waits for blocks."""
    p = params
    model = get_model(p.model)
    gpu = get_gpu(p.gpu)
    cap = _capacity(p, model, gpu, p.kv_dtype, p.prompt_tokens)
    fp8 = _capacity(p, model, gpu, ONE_BYTE_KV, p.prompt_tokens)
    n = cap.max_concurrent_requests
    tokens = p.prompt_tokens + p.output_tokens

    allocated = cap.shared_blocks + n * cap.private_blocks_per_request if n else 0
    stored_tokens = (
        (cap.shared_blocks * p.block_size + n * (tokens - cap.shared_blocks * p.block_size))
        if n
        else 0
    )
    slot_utilization = stored_tokens / (allocated * p.block_size) if allocated else 0.0
    # After the requests finish, prefix caching keeps their full blocks as evictable cache.
    full_private = (tokens - cap.shared_blocks * p.block_size) // p.block_size
    evictable = cap.shared_blocks + n * full_private if (p.prefix_caching and n) else 0

    seconds_at_peak, step_at_peak = _request_seconds(p, model, gpu, n)
    occupancy, step_s = _steady_state(p, model, gpu, n)
    utilization = occupancy / n if n else None
    result = Result(
        model=model.id,
        gpu=gpu.id,
        tensor_parallel=p.tensor_parallel,
        weights_bytes_per_gpu=memory.weight_bytes(model, p.weight_format, p.tensor_parallel),
        kv_bytes_per_token=memory.kv_bytes_per_token(model, p.kv_dtype),
        pool_bytes_per_gpu=cap.pool_bytes,
        pool_gb_per_gpu=gb(cap.pool_bytes),
        pool_gib_per_gpu=gib(cap.pool_bytes),
        block_bytes=cap.block_bytes,
        total_blocks=cap.total_blocks,
        token_capacity=cap.total_blocks * p.block_size,
        blocks_per_request=cap.blocks_per_request,
        shared_blocks=cap.shared_blocks,
        private_blocks_per_request=cap.private_blocks_per_request,
        max_concurrent_requests=n,
        max_concurrent_without_sharing=cap.max_concurrent_without_sharing,
        allocated_blocks_at_peak=allocated,
        live_tokens_at_peak=stored_tokens,
        slot_utilization_at_peak=slot_utilization,
        evictable_blocks_after_peak=evictable,
        request_seconds=p.request_seconds or p.output_tokens * step_s,
        request_seconds_estimated=p.request_seconds == 0,
        decode_step_ms_at_peak=step_at_peak * roofline.MS_PER_S,
        occupancy_needed=occupancy,
        cache_utilization=utilization,
        requests_wait=utilization is None or utilization > 1,
        max_sustainable_rate_per_s=n / seconds_at_peak if seconds_at_peak > 0 else 0.0,
        fp8_max_concurrent_requests=fp8.max_concurrent_requests,
        fp8_concurrency_gain=(fp8.max_concurrent_requests / n) if n else 0.0,
        notes=_notes(p, gpu, n, occupancy, utilization),
    )
    return Sizing(result, cap, fp8, _curves(p, model, gpu))


def _steady_state(p: Params, model: ModelConfig, gpu: GPU, capacity: int) -> tuple[float, float]:
    """(requests in service, decode step seconds) under the arrival rate, by Little's law.

    Time in service grows with the batch it decodes in, so the occupancy L
    solves L = rate × W(L); iterate from one request. Beyond the cache's
    capacity the batch cannot grow, so W is evaluated at most at capacity.
    """
    occupancy = 1.0
    step = 0.0
    for _ in range(64):
        batch = max(1, min(capacity, math.ceil(occupancy)))
        seconds, step = _request_seconds(p, model, gpu, batch)
        new = p.arrival_rate_per_s * seconds
        if abs(new - occupancy) < 1e-3:
            break
        occupancy = new
    return occupancy, step
