"""vram-observe's parameters, result models and limits. Units: bytes; MiB = 2^20 bytes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from labs.base import LabParams, LabResult

Workload = Literal["transformer-block", "matmul-chain"]
DType = Literal["fp32", "bf16", "fp16"]

MIB = 2**20
HEAD_DIM = 64  # attention heads = hidden_size / 64, as in Llama and GPT-2
MLP_RATIO = 4  # GPT-2-style MLP: hidden → 4·hidden → hidden
QKV_MATRICES = 3
MAX_HIDDEN = 8192
MAX_SEQ = 8192
MAX_LAYERS = 16
MAX_BATCH = 65536
MAX_BATCH_SIZES = 8
MAX_CAP_MB = 192 * 1024  # more than any single GPU in the registry
MIN_CAP_MB = 64
# The lab's time limit bounds everything; the OOM search stops early rather than be killed.
TIME_LIMIT_S = 120.0
OOM_SEARCH_BUDGET_S = 60.0
# After the doubling finds an OOM, bisect until the bracket is this fraction of its low end.
OOM_BISECT_RESOLUTION = 1 / 16
# Utilization is sampled after keeping the GPU busy this long (NVML averages over
# a window of 1/6 s to 1 s, depending on the GPU).
UTILIZATION_WINDOW_S = 0.5
MAX_TIMED_ITERATIONS = 200
CPU_WARMUP_SIZE = 256
MIN_SECONDS = 1e-9  # guards rates against a zero-length timing


class Params(LabParams):
    workload: Workload = Field(
        default="transformer-block",
        description="What runs forward: GPT-style transformer blocks (attention + MLP, "
        "12·hidden² weights each) or a chain of hidden×hidden matmuls with GELU.",
    )
    hidden_size: int = Field(
        default=512,
        ge=HEAD_DIM,
        le=MAX_HIDDEN,
        multiple_of=HEAD_DIM,
        description="Model width; a multiple of 64 (one attention head per 64).",
    )
    seq_len: int = Field(default=64, ge=1, le=MAX_SEQ, description="Tokens per sequence.")
    layers: int = Field(
        default=2, ge=1, le=MAX_LAYERS, description="Blocks (or matmuls) in the stack."
    )
    batch_sizes: list[int] = Field(
        default=[1, 2, 4, 8],
        min_length=1,
        max_length=MAX_BATCH_SIZES,
        description="Batch sizes (sequences) to measure, each 1 to max_batch.",
    )
    dtypes: list[DType] = Field(
        default=["fp32", "bf16"],
        min_length=1,
        max_length=3,
        description="Dtypes to repeat the same measurement in (fp32, bf16, fp16): change one "
        "option and compare.",
    )
    find_oom: bool = Field(
        default=True,
        description="On a GPU, keep doubling the batch until out of memory (up to max_batch), "
        "then bisect to the largest batch that fits.",
    )
    max_batch: int = Field(
        default=8192, ge=1, le=MAX_BATCH, description="Largest batch the OOM search may try."
    )
    memory_cap_mb: int = Field(
        default=2048,
        ge=MIN_CAP_MB,
        le=MAX_CAP_MB,
        description="GPU memory (MiB) the OOM search may use; the run's own limit still applies "
        "if it is lower.",
    )

    @field_validator("batch_sizes")
    @classmethod
    def _sorted_unique(cls, v: list[int]) -> list[int]:
        if any(b < 1 or b > MAX_BATCH for b in v):
            raise ValueError(f"every batch size must be between 1 and {MAX_BATCH}")
        return sorted(set(v))

    @field_validator("dtypes")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("each dtype at most once")
        return v


class Measurement(BaseModel):
    dtype: str
    batch: int
    ok: bool = Field(description="False when this batch ran out of memory")
    allocated_bytes: int | None = Field(
        description="CUDA: memory_allocated() with the output alive"
    )
    reserved_bytes: int | None = Field(description="CUDA: memory_reserved() after the forward")
    peak_allocated_bytes: int | None = Field(
        description="CUDA: max_memory_allocated() in the forward"
    )
    peak_reserved_bytes: int | None
    device_used_bytes: int | None = Field(description="CUDA: total − free from cudaMemGetInfo")
    rss_before_bytes: int | None = Field(description="CPU: resident set before the forward")
    rss_peak_bytes: int | None = Field(description="CPU: peak resident set during the forward")
    peak_bytes: int = Field(description="Peak of what this device measures (CUDA allocated or RSS)")
    activation_peak_bytes: int = Field(
        description="peak_bytes minus what was held before the forward"
    )
    seconds: float
    tokens_per_s: float
    utilization_pct: float | None = Field(
        description="NVML GPU utilization (CUDA) or CPU cores busy ×100"
    )


class DtypeSummary(BaseModel):
    dtype: str
    weights_estimate_bytes: int = Field(
        description="memory-budget's rule: parameters × bytes per value"
    )
    weights_measured_bytes: int
    workspace_bytes: int | None = Field(
        description="CUDA: allocations the first forward kept (cuBLAS workspace)"
    )
    activation_bytes_per_sequence: float | None = Field(description="Slope of peak vs batch")
    projected_max_batch: int | None = Field(description="Batch at which the slope reaches the cap")
    largest_fit_batch: int | None = Field(description="CUDA OOM search: largest batch that ran")
    first_oom_batch: int | None = Field(description="CUDA OOM search: smallest batch that failed")
    oom_message: str | None
    oom_search: str
    activations_measured: bool = Field(
        default=True,
        description="False where the activation figures cannot be trusted: on a CPU, RSS "
        "peaks that do not grow with the batch (the heap reuses memory freed earlier)",
    )


class GapItem(BaseModel):
    item: str
    bytes: int | None
    note: str


class Result(LabResult):
    device: Literal["cuda", "cpu"]
    device_name: str
    measured: str = Field(description="What the numbers are: VRAM counters, or host RSS")
    workload: str
    param_count: int
    memory_cap_bytes: int
    measurements: list[Measurement]
    summaries: list[DtypeSummary]
    gap: list[GapItem]
    weights_mib: float = Field(description="Measured weights of the first dtype, MiB")
    activation_mib_per_sequence: float | None
    largest_batch: int | None = Field(
        description="Largest batch that fit in the first dtype (CUDA)"
    )
    cuda_context_mib: float | None
    notes: list[str]
    finding: str | None = Field(
        default=None, description="What this run could and could not measure, in one paragraph"
    )
