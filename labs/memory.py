"""Memory accounting rules shared by the budget labs and the content facts.

What counts as weights (``weight_format``):
- ``fp32``, ``bf16``, ``fp16`` are plain dtypes: every tensor is stored in it.
- Every other format is a *weight quantization* format: the projection
  matrices (q, k, v, o, gate, up, down, every expert's) are quantized; the
  token embedding, lm_head, norms, biases and the MoE router stay in bf16 —
  the default of llm-compressor, ModelOpt, AutoAWQ/GPTQ and bitsandbytes.
- Quantized storage counts every stored byte: element codes, block scales and
  per-tensor scales, with the layout of the format named in ``WEIGHT_FORMATS``
  (for example nvfp4: 4-bit E2M1 codes + one E4M3 scale per 16 values
  = 4.5 bits/value, plus one fp32 scale per tensor).

KV cache: ``kv_dtype`` bytes per cached element; per-tensor KV scales (fp8)
are a few bytes per layer and are not counted.

Tensor parallelism splits tensors as Megatron/vLLM do (see ``models.TPRule``);
when TP exceeds the number of KV heads each GPU keeps one KV head, replicated.

Units: bytes everywhere; GB = 1e9 bytes, GiB = 2^30 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from labs.gpus import GPU
from labs.models import KV_TENSORS_PER_LAYER, ModelConfig, TensorGroup, TPRule, tensor_groups

BITS_PER_BYTE = 8
BYTES_PER_GB = 10**9
BYTES_PER_GIB = 2**30

# Unquantized tensors (embeddings, norms, biases, router) in quantized models.
HIGH_PRECISION_BITS = 16

# Per-GPU allowance for what is not weights or KV cache: the CUDA context
# (~0.5 GB with cuBLAS loaded), cuBLAS/NCCL workspaces, CUDA graphs, the
# activation peak of one forward pass and allocator fragmentation. vLLM
# measures this by profiling; 2 GB is a typical single-node serving figure.
DEFAULT_RUNTIME_OVERHEAD_GB = 2.0

# The largest tensor-parallel degree the labs consider (one NVL72 domain is
# bigger, but 64 covers every model in the registry).
MAX_TENSOR_PARALLEL = 64

WeightFormatKey = Literal[
    "fp32", "bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4", "nf4", "q4_0", "q8_0"
]
KvDtype = Literal["bf16", "fp16", "fp8", "int8", "fp32"]
CapacityBasis = Literal["datasheet", "nvidia-smi"]

KV_DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class WeightFormat:
    """How one weight format stores a ``[rows, cols]`` matrix.

    ``block_size`` values along the input dim share one ``scale_bits`` scale;
    ``block_size=None`` means one scale per output row (per channel).
    """

    key: str
    element_bits: int
    quantized: bool
    block_size: int | None = None
    scale_bits: int = 0
    tensor_scale_bits: int = 0
    layout: str = ""

    def matrix_bytes(self, rows: int, cols: int) -> int:
        """Bytes of one ``[rows, cols]`` matrix: codes + block scales + tensor scale."""
        codes_bits = rows * cols * self.element_bits
        if not self.quantized:
            return math.ceil(codes_bits / BITS_PER_BYTE)
        blocks_per_row = 1 if self.block_size is None else math.ceil(cols / self.block_size)
        scale_bits = rows * blocks_per_row * self.scale_bits
        return math.ceil((codes_bits + scale_bits + self.tensor_scale_bits) / BITS_PER_BYTE)

    @property
    def bits_per_value(self) -> float:
        """Stored bits per element including block scales (not per-row or per-tensor ones)."""
        if not self.quantized or self.block_size is None:
            return float(self.element_bits)
        return self.element_bits + self.scale_bits / self.block_size


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.key: f
    for f in (
        WeightFormat("fp32", 32, False, layout="IEEE binary32"),
        WeightFormat("bf16", 16, False, layout="bfloat16"),
        WeightFormat("fp16", 16, False, layout="IEEE binary16"),
        WeightFormat(
            "fp8", 8, True, None, 32, layout="E4M3 codes, one fp32 scale per output channel"
        ),
        WeightFormat(
            "int8", 8, True, None, 32, layout="symmetric int8, one fp32 scale per output channel"
        ),
        WeightFormat(
            "int4", 4, True, 128, 16, layout="symmetric int4, one fp16 scale per 128 values (GPTQ/AWQ-style)"
        ),
        WeightFormat(
            "nvfp4",
            4,
            True,
            16,
            8,
            32,
            layout="E2M1 codes, one E4M3 scale per 16 values, one fp32 scale per tensor",
        ),
        WeightFormat("mxfp4", 4, True, 32, 8, layout="E2M1 codes, one E8M0 scale per 32 values (OCP MX)"),
        WeightFormat(
            "nf4", 4, True, 64, 32, layout="NF4 codes, one fp32 absmax per 64 values (bitsandbytes, no double quant)"
        ),
        WeightFormat("q4_0", 4, True, 32, 16, layout="GGUF Q4_0: 18-byte block = fp16 scale + 32 nibbles"),
        WeightFormat("q8_0", 8, True, 32, 16, layout="GGUF Q8_0: 34-byte block = fp16 scale + 32 int8"),
    )
}


def valid_tensor_parallel(model: ModelConfig, tp: int) -> str | None:
    """``None`` if ``tp`` can shard ``model``, else the reason it cannot (vLLM's rules).

    Query heads must split evenly; KV heads must either split evenly
    (``kv_heads % tp == 0``) or be replicated evenly (``tp % kv_heads == 0``).
    """
    if tp < 1:
        return "tensor_parallel must be at least 1"
    if model.num_attention_heads % tp:
        return (
            f"{tp} does not divide the {model.num_attention_heads} attention heads of {model.id}"
        )
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
