"""fp8-savings's parameters and result (no torch)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labs.base import LabResult
from labs.catalog import memory, roofline
from labs.catalog.memory import CapacityBasis
from labs.catalog.params import ContextTokens, ModelOnGpuParams, TensorParallel

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
