"""Memory accounting rules shared by the budget labs and the content facts.

What counts as weights, and how each format stores them: ``labs.catalog.formats``.

Tensor parallelism splits tensors as Megatron/vLLM do (see ``models.TPRule``);
when TP exceeds the number of KV heads each GPU keeps one KV head, replicated.

Units: bytes everywhere; GB = 1e9 bytes, GiB = 2^30 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

from labs.catalog.formats import KV_DTYPE_BYTES, WEIGHT_FORMATS
from labs.catalog.gpus import GPU
from labs.catalog.models import (
    KV_TENSORS_PER_LAYER,
    ModelConfig,
    TensorGroup,
    TPRule,
    get_model,
    tensor_groups,
)

BYTES_PER_GB = 10**9
BYTES_PER_GIB = 2**30

# Per-GPU allowance for what is not weights or KV cache: the CUDA context
# (~0.5 GB with cuBLAS loaded), cuBLAS/NCCL workspaces, CUDA graphs, the
# activation peak of one forward pass and allocator fragmentation. vLLM
# measures this by profiling; 2 GB is a typical single-node serving figure.
DEFAULT_RUNTIME_OVERHEAD_GB = 2.0

# The largest tensor-parallel degree the labs consider (one NVL72 domain is
# bigger, but 64 covers every model in the registry).
MAX_TENSOR_PARALLEL = 64

CapacityBasis = Literal["datasheet", "nvidia-smi"]
# Tokens per paged KV-cache block: vLLM's default ``block_size``.
VLLM_KV_BLOCK_TOKENS: Final = 16


def valid_tensor_parallel(model: ModelConfig, tp: int) -> str | None:
    """``None`` if ``tp`` can shard ``model``, else the reason it cannot (vLLM's rules).

    Query heads must split evenly; KV heads must either split evenly
    (``kv_heads % tp == 0``) or be replicated evenly (``tp % kv_heads == 0``).
    """
    if tp < 1:
        return "tensor_parallel must be at least 1"
    if model.num_attention_heads % tp:
        return f"{tp} does not divide the {model.num_attention_heads} attention heads of {model.id}"
    kv = model.num_kv_heads
    if kv % tp and tp % kv:
        return f"{tp} neither divides nor is a multiple of the {kv} KV heads of {model.id}"
    if model.intermediate_size % tp:
        return f"{tp} does not divide the MLP width {model.intermediate_size} of {model.id}"
    return None


def valid_tensor_parallel_sizes(model: ModelConfig, limit: int = MAX_TENSOR_PARALLEL) -> list[int]:
    return [tp for tp in range(1, limit + 1) if valid_tensor_parallel(model, tp) is None]


def kv_heads_per_gpu(model: ModelConfig, tp: int) -> int:
    """KV heads each GPU stores: a share of them, or one replicated head when TP > KV heads."""
    return max(1, model.num_kv_heads // tp)


def shard_shape(model: ModelConfig, group: TensorGroup, tp: int) -> tuple[int, int]:
    """``[rows, cols]`` of one GPU's shard of a tensor in ``group`` under TP degree ``tp``."""
    if tp == 1 or group.tp is TPRule.replicated:
        return group.rows, group.cols
    if group.tp is TPRule.row:
        return group.rows, math.ceil(group.cols / tp)
    if group.kv_heads:
        per_gpu = kv_heads_per_gpu(model, tp) * model.head_dim
        return (1, per_gpu) if group.rows == 1 else (per_gpu, group.cols)
    if group.rows == 1:  # a bias vector split with its weight's output rows
        return 1, math.ceil(group.cols / tp)
    return math.ceil(group.rows / tp), group.cols


def group_bytes(model: ModelConfig, group: TensorGroup, weight_format: str, tp: int = 1) -> int:
    """Bytes one GPU holds for all tensors of ``group`` (``tp=1``: the whole model's bytes)."""
    fmt = WEIGHT_FORMATS[weight_format]
    if fmt.quantized and not group.linear:
        fmt = WEIGHT_FORMATS["bf16"]
    rows, cols = shard_shape(model, group, tp)
    return fmt.matrix_bytes(rows, cols) * group.count


def weight_bytes_by_kind(model: ModelConfig, weight_format: str, tp: int = 1) -> dict[str, int]:
    """Bytes per tensor kind on one GPU (with ``tp=1``: the whole model)."""
    return {g.kind: group_bytes(model, g, weight_format, tp) for g in tensor_groups(model)}


def weight_bytes(model: ModelConfig, weight_format: str, tp: int = 1) -> int:
    """Bytes of all weights on one GPU under TP degree ``tp`` (``tp=1``: the whole model)."""
    return sum(weight_bytes_by_kind(model, weight_format, tp).values())


def kv_bytes_per_token(model: ModelConfig, kv_dtype: str, tp: int = 1) -> int:
    """Bytes of K and V per token, all layers, on one GPU under TP degree ``tp``.

    2 × layers × KV heads (per GPU) × head_dim × bytes per element. With
    ``tp=1`` this is the model's figure: Llama 3.1 70B bf16 → 327,680 bytes.
    """
    return (
        KV_TENSORS_PER_LAYER
        * model.num_layers
        * kv_heads_per_gpu(model, tp)
        * model.head_dim
        * KV_DTYPE_BYTES[kv_dtype]
    )


def gb(n_bytes: float) -> float:
    """Bytes → GB (1e9 bytes)."""
    return n_bytes / BYTES_PER_GB


def gib(n_bytes: float) -> float:
    """Bytes → GiB (2^30 bytes)."""
    return n_bytes / BYTES_PER_GIB


def gpu_capacity_bytes(gpu: GPU, basis: str) -> int:
    """Capacity in bytes: ``datasheet`` (marketed GB × 1e9) or ``nvidia-smi`` (reported MiB × 2^20)."""
    return gpu.memory_bytes if basis == "datasheet" else gpu.visible_memory_bytes


@dataclass(frozen=True)
class GpuBudget:
    """What one GPU must hold, in bytes, against its capacity."""

    weights: int
    kv_cache: int
    overhead: int
    capacity: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.overhead

    @property
    def headroom(self) -> int:
        """Capacity minus total; negative when it does not fit."""
        return self.capacity - self.total

    @property
    def fits(self) -> bool:
        return self.headroom >= 0


def per_gpu_budget(
    model: ModelConfig,
    gpu: GPU,
    *,
    weight_format: str,
    kv_dtype: str,
    kv_tokens: int,
    tp: int,
    overhead_gb: float = DEFAULT_RUNTIME_OVERHEAD_GB,
    basis: str = "datasheet",
) -> GpuBudget:
    """Per-GPU bytes for serving ``model`` with ``kv_tokens`` cached tokens (batch × context)."""
    return GpuBudget(
        weights=weight_bytes(model, weight_format, tp),
        kv_cache=kv_tokens * kv_bytes_per_token(model, kv_dtype, tp),
        overhead=round(overhead_gb * BYTES_PER_GB),
        capacity=gpu_capacity_bytes(gpu, basis),
    )


def min_fitting_tensor_parallel(
    model: ModelConfig,
    gpu: GPU,
    *,
    weight_format: str,
    kv_dtype: str,
    kv_tokens: int,
    overhead_gb: float = DEFAULT_RUNTIME_OVERHEAD_GB,
    basis: str = "datasheet",
    block_aligned: bool = False,
) -> int | None:
    """The smallest valid TP degree at which every GPU fits, or ``None`` up to the limit.

    ``block_aligned=True`` also skips degrees that split a row-parallel weight inside a
    scale block of ``weight_format`` (``block_alignment_problems``), which kernels reject.
    """
    for tp in valid_tensor_parallel_sizes(model):
        if block_aligned and block_alignment_problems(model, weight_format, tp):
            continue
        budget = per_gpu_budget(
            model,
            gpu,
            weight_format=weight_format,
            kv_dtype=kv_dtype,
            kv_tokens=kv_tokens,
            tp=tp,
            overhead_gb=overhead_gb,
            basis=basis,
        )
        if budget.fits:
            return tp
    return None


def block_alignment_problems(model: ModelConfig, weight_format: str, tp: int) -> list[str]:
    """Row-parallel shards whose input width is not a whole number of scale blocks.

    Kernels for block formats (GPTQ/AWQ Marlin, NVFP4, MX) reject such a TP
    degree, e.g. Qwen2.5-72B int4 (group 128) at TP 8: 29568 / 8 = 3696.
    """
    fmt = WEIGHT_FORMATS[weight_format]
    if not fmt.quantized or fmt.block_size is None or tp == 1:
        return []
    problems = []
    for group in tensor_groups(model):
        if group.linear and group.tp is TPRule.row:
            _, cols = shard_shape(model, group, tp)
            if group.cols % tp or cols % fmt.block_size:
                problems.append(
                    f"{group.kind}: {group.cols} inputs / TP {tp} = {group.cols / tp:g} per GPU, "
                    f"not a multiple of the {fmt.block_size}-value {weight_format} block"
                )
    return problems


def check_tensor_parallel(model_id: str, tp: int) -> int:
    """``tp`` if it can shard the registry model ``model_id``; ``ValueError`` saying why not."""
    model = get_model(model_id)
    problem = valid_tensor_parallel(model, tp)
    if problem:
        valid = ", ".join(str(t) for t in valid_tensor_parallel_sizes(model))
        raise ValueError(f"{problem}; valid tensor_parallel sizes: {valid}")
    return tp


def check_context(model_id: str, tokens: int) -> int:
    """``tokens`` if within the model's maximum context; ``ValueError`` otherwise."""
    model = get_model(model_id)
    if tokens > model.max_context:
        raise ValueError(
            f"{tokens} tokens exceeds the {model.max_context}-token context of {model_id}"
        )
    return tokens
