"""Lab ``kv-capacity``: how many requests fit in a paged KV cache, and do they queue?

The pool is what vLLM gives the cache: capacity × ``gpu_memory_utilization``
minus weights and the runtime allowance, cut into blocks of ``block_size``
tokens (every layer's K and V for those tokens, on one GPU of the
tensor-parallel group). A request holds ceil(tokens / block) blocks; with
prefix caching the full blocks of a shared system prompt are stored once
(only *full* blocks are shared: they are hashed by content). Requests are
counted at their full length (prompt + output), the worst case a scheduler
must be ready for.

Waiting: by Little's law the mean number of requests in service is
arrival rate × time in service. Time in service is ``request_seconds`` or,
when 0, ``output_tokens`` decode steps from the memory-bound roofline of
``labs.catalog.roofline.decode_step`` at that occupancy. If the occupancy the load
needs exceeds the requests the cache can hold, requests wait for blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from labs.base import Context, Lab, LabResult, NeedsGPU
from labs.catalog import memory, roofline
from labs.catalog.formats import KvDtype, WeightFormatKey
from labs.catalog.gpus import GPU, get_gpu
from labs.catalog.memory import CapacityBasis, gb, gib
from labs.catalog.models import ModelConfig, get_model
from labs.catalog.params import ModelOnGpuParams, RegistryModel, TensorParallel
from labs.presenters import concepts, headlines

# vLLM's default share of device memory for weights + activations + KV cache.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
MAX_TOKENS = 1_048_576
MAX_ARRIVAL_RATE = 10_000.0
# Occupancy above this share of the cache's capacity: bursts already queue.
HIGH_UTILIZATION = 0.8
ONE_BYTE_KV = "fp8"
PLOT_PROMPT_POINTS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)

BlockSize = Literal[1, 8, 16, 32, 64, 128]


class Params(ModelOnGpuParams):
    model: RegistryModel = "llama-3.1-8b"
    weight_format: WeightFormatKey = Field(
        default="bf16", description="How the weights are stored."
    )
    kv_dtype: KvDtype = Field(default="bf16", description="Element type of the KV cache.")
    tensor_parallel: TensorParallel = Field(
        default=1, description="GPUs the model and its KV cache are split across."
    )
    block_size: BlockSize = Field(
        default=memory.VLLM_KV_BLOCK_TOKENS,
        description="Tokens per KV cache block (vLLM default 16).",
    )
    gpu_memory_utilization: float = Field(
        default=DEFAULT_GPU_MEMORY_UTILIZATION,
        gt=0,
        le=1,
        description="Share of GPU memory the engine may use for weights, activations and KV cache.",
    )
    overhead_gb: float = Field(
        default=memory.DEFAULT_RUNTIME_OVERHEAD_GB,
        ge=0,
        le=64,
        description="Per-GPU GB (1e9 B) inside that share that is not weights or KV: activations, "
        "CUDA graphs, workspaces.",
    )
    capacity_basis: CapacityBasis = Field(
        default="datasheet", description="Budget against the datasheet GB or the nvidia-smi total."
    )
    prompt_tokens: int = Field(
        default=1000,
        ge=1,
        le=MAX_TOKENS,
        description="Prompt length per request, shared prefix included.",
    )
    output_tokens: int = Field(
        default=500,
        ge=1,
        le=MAX_TOKENS,
        validate_default=True,  # checked against the prompt and model even when left out
        description="Generated tokens per request.",
    )
    shared_prefix_tokens: int = Field(
        default=500,
        ge=0,
        le=MAX_TOKENS,
        validate_default=True,
        description="Leading prompt tokens every request shares (a system prompt).",
    )
    prefix_caching: bool = Field(
        default=True, description="Store the shared prefix's full blocks once."
    )
    arrival_rate_per_s: float = Field(
        default=5.0,
        ge=0,
        le=MAX_ARRIVAL_RATE,
        description="Requests arriving per second (steady state).",
    )
    request_seconds: float = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="Seconds a request holds its blocks; 0 estimates it from a memory-bound decode roofline.",
    )

    @field_validator("output_tokens")
    @classmethod
    def _fits_context(cls, v: int, info: ValidationInfo) -> int:
        model, prompt = info.data.get("model"), info.data.get("prompt_tokens")
        # Prompt plus output must fit the model's context; the field keeps its own value.
        if model and prompt:
            memory.check_context(model, prompt + v)
        return v

    @field_validator("shared_prefix_tokens")
    @classmethod
    def _prefix_within_prompt(cls, v: int, info: ValidationInfo) -> int:
        prompt = info.data.get("prompt_tokens")
        if prompt is not None and v > prompt:
            raise ValueError(f"the shared prefix ({v} tokens) is longer than the prompt ({prompt})")
        return v


class Capacity(BaseModel):
    kv_dtype: str
    kv_bytes_per_token_per_gpu: int
    block_bytes: int
    pool_bytes: int
    total_blocks: int
    blocks_per_request: int
    shared_blocks: int
    private_blocks_per_request: int
    max_concurrent_requests: int
    max_concurrent_without_sharing: int


class Result(LabResult):
    model: str
    gpu: str
    tensor_parallel: int
    weights_bytes_per_gpu: int
    kv_bytes_per_token: int
    pool_bytes_per_gpu: int
    pool_gb_per_gpu: float
    pool_gib_per_gpu: float
    block_bytes: int
    total_blocks: int
    token_capacity: int
    blocks_per_request: int
    shared_blocks: int
    private_blocks_per_request: int
    max_concurrent_requests: int
    max_concurrent_without_sharing: int
    allocated_blocks_at_peak: int
    live_tokens_at_peak: int
    slot_utilization_at_peak: float
    evictable_blocks_after_peak: int
    request_seconds: float
    request_seconds_estimated: bool
    decode_step_ms_at_peak: float
    occupancy_needed: float
    cache_utilization: float | None  # None when not one request fits
    requests_wait: bool
    max_sustainable_rate_per_s: float
    fp8_max_concurrent_requests: int
    fp8_concurrency_gain: float
    notes: list[str]


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


def run(params: Params, ctx: Context) -> Result:
    sizing = size(params)
    present(sizing, params, ctx)
    return sizing.result


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
    ctx.progress(0.1, "sizing the block pool")
    ctx.progress(0.5, "estimating time in service")
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
    )
    for note in r.notes:
        ctx.log(note)
    ctx.progress(1.0, "done")


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


LAB = Lab(
    id="kv-capacity",
    title="KV cache capacity: blocks, concurrent requests and waiting",
    summary="Cut the memory left after weights into paged KV blocks, count how many requests of a "
    "given length fit with and without a shared prefix, and see whether a load would queue; then "
    "repeat with an fp8 KV cache.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("kv_bytes_per_token", "bytes"),
        ("total_blocks", "blocks"),
        ("max_concurrent_requests", "requests"),
        ("fp8_max_concurrent_requests", "requests"),
    ),
    headline=headlines.kv_capacity,
    concept=concepts.kv_capacity,
)
