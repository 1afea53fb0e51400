"""kv-capacity's parameters and result (no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from labs.base import LabResult
from labs.catalog import memory
from labs.catalog.formats import KvDtype, WeightFormatKey
from labs.catalog.memory import CapacityBasis
from labs.catalog.params import ModelOnGpuParams, RegistryModel, TensorParallel

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
