"""memory-budget's parameters and result (no torch)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labs.base import LabResult
from labs.catalog import memory
from labs.catalog.formats import KvDtype, WeightFormatKey
from labs.catalog.memory import CapacityBasis
from labs.catalog.params import ContextTokens, ModelOnGpuParams, TensorParallel

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
