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
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, Field, ValidationInfo

from labs.base import LabParams
from labs.gpus import GPU, GpuId
from labs.models import (
    KV_TENSORS_PER_LAYER,
    ModelConfig,
    ModelId,
    TensorGroup,
    TPRule,
    active_param_count,
    get_model,
    tensor_groups,
)
from labs.quant import constants as C
from labs.quant.spec import FP16_BITS, FP32_BITS, INT4_DEFAULT_GROUP, SPECS, FormatKey, FormatSpec

BITS_PER_BYTE = 8
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

WeightFormatKey = Literal[
    "fp32", "bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4", "nf4", "q4_0", "q8_0"
]
KvDtype = Literal["bf16", "fp16", "fp8", "int8", "fp32"]
CapacityBasis = Literal["datasheet", "nvidia-smi"]

KV_DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
# Tokens per paged KV-cache block: vLLM's default ``block_size``.
VLLM_KV_BLOCK_TOKENS: Final = 16


@dataclass(frozen=True)
class WeightFormat:
    """How one checkpoint weight format stores a ``[rows, cols]`` matrix.

    ``spec`` is its row of ``labs.quant.spec`` (block size, element, scale, zero-point
    and tensor-scale bits), configured as checkpoints store it: ``block_size`` values
    along the input dim share one scale (and, for asymmetric formats such as AWQ, one
    zero point); ``block_size=None`` means one scale per output row (per channel).
    ``column_bits`` are stored once per input column (GPTQ's ``g_idx``).
    """

    key: str
    spec: FormatSpec
    quantized: bool
    layout: str
    column_bits: int = 0

    @property
    def element_bits(self) -> int:
        return self.spec.element_bits

    @property
    def block_size(self) -> int | None:
        return self.spec.block_size

    def matrix_bytes(self, rows: int, cols: int) -> int:
        """Bytes of one ``[rows, cols]`` matrix: codes + block scales and zero points +
        per-column indices + tensor scale. Unlike labs.quant, which pads each row to whole
        blocks, the codes of a partial last block are counted as they are (a checkpoint
        holds only the real values; ``block_alignment_problems`` flags such shapes)."""
        spec = self.spec
        codes_bits = rows * cols * spec.element_bits
        if not self.quantized:
            return math.ceil(codes_bits / BITS_PER_BYTE)
        blocks_per_row = 1 if spec.block_size is None else math.ceil(cols / spec.block_size)
        scale_bits = rows * blocks_per_row * (spec.scale_bits + spec.zero_point_bits)
        column_bits = cols * self.column_bits
        return math.ceil(
            (codes_bits + scale_bits + column_bits + spec.tensor_scale_bits) / BITS_PER_BYTE
        )

    @property
    def bits_per_value(self) -> float:
        """Stored bits per element including block scales and zero points (not per-row,
        per-column or per-tensor ones)."""
        return self.spec.bits_per_value


INT4_GROUP = INT4_DEFAULT_GROUP  # the usual GPTQ/AWQ group size
GPTQ_G_IDX_BITS = 32  # g_idx: the group of each input column, int32
NF4_BLOCK = C.NF4_BLOCK_SIZE  # bitsandbytes blocksize for 4-bit (qlora-budget reads it)
# AWQ and GPTQ checkpoints: an fp16 scale and a 4-bit zero point per group of 128.
_INT4_ZERO_POINT = SPECS[FormatKey.INT4].with_granularity(
    INT4_GROUP, FP16_BITS, "fp16", zero_point_bits=SPECS[FormatKey.INT4].element_bits
)

WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.key: f
    for f in (
        WeightFormat("fp32", FormatSpec.dtype("fp32", FP32_BITS), False, "IEEE binary32"),
        WeightFormat("bf16", FormatSpec.dtype("bf16", FP16_BITS), False, "bfloat16"),
        WeightFormat("fp16", FormatSpec.dtype("fp16", FP16_BITS), False, "IEEE binary16"),
        WeightFormat(
            "fp8",
            SPECS[FormatKey.FP8_E4M3].with_granularity("channel", FP32_BITS, "fp32"),
            quantized=True,
            layout="E4M3 codes, one fp32 scale per output channel",
        ),
        WeightFormat(
            "int8",
            SPECS[FormatKey.INT8],
            quantized=True,
            layout="symmetric int8, one fp32 scale per output channel",
        ),
        WeightFormat(
            "int4",
            SPECS[FormatKey.INT4].with_granularity(INT4_GROUP, FP16_BITS, "fp16"),
            quantized=True,
            layout="symmetric int4, one fp16 scale per 128 values (what vLLM's Marlin kernel keeps "
            "of a symmetric GPTQ checkpoint)",
        ),
        WeightFormat(
            "awq",
            _INT4_ZERO_POINT,
            quantized=True,
            layout="asymmetric int4 (AutoAWQ GEMM): one fp16 scale and one 4-bit zero point "
            "(qzeros, eight per int32) per 128 values",
        ),
        WeightFormat(
            "gptq",
            _INT4_ZERO_POINT,
            quantized=True,
            column_bits=GPTQ_G_IDX_BITS,
            layout="GPTQ checkpoint (AutoGPTQ/GPTQModel): int4 codes eight per int32 "
            "(qweight), one fp16 scale and one 4-bit zero point (qzeros, stored even when "
            "symmetric) per 128 values, one int32 group index per input column (g_idx)",
        ),
        WeightFormat(
            "nvfp4",
            SPECS[FormatKey.NVFP4],
            quantized=True,
            layout="E2M1 codes, one E4M3 scale per 16 values, one fp32 scale per tensor",
        ),
        WeightFormat(
            "mxfp4",
            SPECS[FormatKey.MXFP4],
            quantized=True,
            layout="E2M1 codes, one E8M0 scale per 32 values (OCP MX v1.0)",
        ),
        WeightFormat(
            "nf4",
            SPECS[FormatKey.NF4],
            quantized=True,
            layout="NF4 codes, one fp32 absmax per 64 values (bitsandbytes, no double quant)",
        ),
        WeightFormat(
            "q4_0",
            SPECS[FormatKey.Q4_0],
            quantized=True,
            layout="GGUF Q4_0: 18-byte block = fp16 scale + 32 nibbles",
        ),
        WeightFormat(
            "q8_0",
            SPECS[FormatKey.Q8_0],
            quantized=True,
            layout="GGUF Q8_0: 34-byte block = fp16 scale + 32 int8",
        ),
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


# --- Lab parameters: a registry model on a GPU -------------------------------
# The budget labs share these fields. The two cross-field checks (a TP degree
# that shards the chosen model, a length within its context) live in the field
# types, so they run wherever a lab declares the field, and with
# ``validate_default`` they run on defaults too: a request that changes only
# ``model`` is checked against the defaults it keeps, and an error stays on
# its own field. Each check reads the validated ``model``, so it must be
# declared first: ``ModelOnGpuParams`` does that.


def _tp_shards_model(tp: int, info: ValidationInfo) -> int:
    model = info.data.get("model")  # absent when the model itself was rejected
    return check_tensor_parallel(model, tp) if model else tp


def _within_model_context(tokens: int, info: ValidationInfo) -> int:
    model = info.data.get("model")
    return check_context(model, tokens) if model else tokens


RegistryModel = Annotated[
    ModelId, Field(description="Model from the registry (shapes from its config.json).")
]
RegistryGpu = Annotated[GpuId, Field(description="GPU model (each of the tensor_parallel GPUs).")]
TensorParallel = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_TENSOR_PARALLEL,
        validate_default=True,
        description="GPUs the model is split across (Megatron-style); must divide the attention "
        "heads, and divide or be a multiple of the KV heads.",
    ),
    AfterValidator(_tp_shards_model),
]
"""A tensor-parallel degree that can shard the params' ``model`` (``check_tensor_parallel``)."""
ContextTokens = Annotated[
    int,
    Field(
        ge=1,
        validate_default=True,
        description="Tokens per sequence, at most the model's context.",
    ),
    AfterValidator(_within_model_context),
]
"""A token count within the params' ``model`` context (``check_context``)."""


class ModelOnGpuParams(LabParams):
    """Params of a lab about a registry model on a GPU: ``model`` and ``gpu`` come first,
    so ``TensorParallel`` and ``ContextTokens`` fields declared after them are checked
    against the model. A lab changes a default by redeclaring the field with the same
    type, e.g. ``model: RegistryModel = "llama-3.1-8b"`` (the field keeps its place)."""

    model: RegistryModel = "llama-3.1-70b"
    gpu: RegistryGpu = "h100"


# --- Decode roofline -------------------------------------------------------
# A decode step reads every weight the batch touches (one embedding row per
# sequence, not the table) and every cached K/V of every sequence once; it is
# memory-bound when those bytes / bandwidth exceed FLOPs / peak compute. Achieved bandwidth is a fraction of the datasheet peak.
DEFAULT_BANDWIDTH_EFFICIENCY = 0.8
# Per-step cost that no weight format changes: kernel launches, sampling,
# scheduling, tensor-parallel all-reduce latency. Milliseconds.
DEFAULT_STEP_OVERHEAD_MS = 2.0
# Multiply-accumulate = 2 FLOPs.
FLOPS_PER_MAC = 2
# Attention in decode is two matmuls against the cache: Q·K^T and P·V.
ATTENTION_MATMULS = 2
TFLOPS = 10**12
MS_PER_S = 1000

# Tensor-core input type a weight format computes in when the GPU has it;
# otherwise the weights are dequantized and the matmul runs in bf16/fp16.
# fp32 weights are assumed to run as TF32 (torch.backends.cuda.matmul.allow_tf32).
_NATIVE_COMPUTE = {"fp8": "fp8", "int8": "int8", "nvfp4": "fp4", "mxfp4": "fp4", "fp32": "tf32"}
_NATIVE_TENSOR_TYPE = {
    "fp8": "fp8_e4m3",
    "int8": "int8",
    "nvfp4": "nvfp4",
    "mxfp4": "mxfp4",
    "fp32": "tf32",
}


def compute_dtype(gpu: GPU, weight_format: str) -> str:
    """The ``dense_tflops`` key a decode matmul runs at for ``weight_format`` on ``gpu``."""
    native = _NATIVE_COMPUTE.get(weight_format)
    if native and gpu.supports(_NATIVE_TENSOR_TYPE[weight_format]) and native in gpu.dense_tflops:
        return native
    return "bf16" if "bf16" in gpu.dense_tflops else "fp16"


def expected_distinct_experts(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts that ``tokens`` tokens touch when each picks ``top_k`` of
    ``experts`` uniformly and independently: E × (1 − (1 − k/E)^tokens)."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def expected_active_experts(model: ModelConfig, batch: int) -> float:
    """Experts per MoE layer that a batch touches, assuming uniform independent routing
    (``expected_distinct_experts``). Dense models: 1."""
    if not model.is_moe:
        return 1.0
    return expected_distinct_experts(model.num_experts, model.num_experts_per_token, batch)


def weight_bytes_read_per_step(model: ModelConfig, weight_format: str, tp: int, batch: int) -> int:
    """Weight bytes one GPU reads in a decode step: every weight, except unrouted MoE
    experts and the token embedding table, of which a step looks up only one row per
    sequence (at most ``batch`` rows of this GPU's shard). The lm_head is a matmul over the
    whole vocabulary and is read in full; a tied embedding *is* the lm_head, so it is
    read in full too."""
    share = expected_active_experts(model, batch) / model.num_experts
    total = 0
    for group in tensor_groups(model):
        n = group_bytes(model, group, weight_format, tp)
        if model.is_moe and group.kind in ("mlp_gate", "mlp_up", "mlp_down"):
            n = round(n * share)
        if group.kind == "embedding" and not model.tie_word_embeddings:
            rows, _ = shard_shape(model, group, tp)
            n = n * min(batch, rows) // rows
        total += n
    return total


@dataclass(frozen=True)
class DecodeStep:
    """One decode step on one GPU of the tensor-parallel group. Seconds and bytes."""

    weight_bytes: int
    kv_bytes: int
    flops: float
    memory_s: float
    compute_s: float
    overhead_s: float

    @property
    def seconds(self) -> float:
        return max(self.memory_s, self.compute_s) + self.overhead_s

    @property
    def bound(self) -> str:
        return "memory" if self.memory_s >= self.compute_s else "compute"


def decode_step(
    model: ModelConfig,
    gpu: GPU,
    *,
    weight_format: str,
    kv_dtype: str,
    tp: int,
    batch: int,
    context_tokens: int,
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY,
    overhead_ms: float = DEFAULT_STEP_OVERHEAD_MS,
) -> DecodeStep:
    """Roofline time of one decode step generating one token for each of ``batch`` sequences
    that each hold ``context_tokens`` cached tokens."""
    weights = weight_bytes_read_per_step(model, weight_format, tp, batch)
    kv = batch * context_tokens * kv_bytes_per_token(model, kv_dtype, tp)
    # The embedding is a lookup, not a matmul (unless tied to the lm_head).
    lookup_params = 0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size
    matmul_flops = FLOPS_PER_MAC * (active_param_count(model) - lookup_params) * batch / tp
    attention_flops = (
        ATTENTION_MATMULS
        * FLOPS_PER_MAC
        * batch
        * context_tokens
        * model.q_dim
        * model.num_layers
        / tp
    )
    flops = matmul_flops + attention_flops
    peak = gpu.dense_tflops[compute_dtype(gpu, weight_format)] * TFLOPS
    return DecodeStep(
        weight_bytes=weights,
        kv_bytes=kv,
        flops=flops,
        memory_s=(weights + kv) / (gpu.bandwidth_bytes_per_s * bandwidth_efficiency),
        compute_s=flops / peak,
        overhead_s=overhead_ms / MS_PER_S,
    )
