"""Decode roofline: the time of one decode step on one GPU of a tensor-parallel group.

A decode step reads every weight the batch touches (one embedding row per sequence, not
the table) and every cached K/V of every sequence once; it is memory-bound when those
bytes / bandwidth exceed FLOPs / peak compute. Seconds and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from labs.catalog.formats import WEIGHT_FORMATS, throughput_key
from labs.catalog.gpus import GPU
from labs.catalog.memory import group_bytes, kv_bytes_per_token, shard_shape
from labs.catalog.models import ModelConfig, active_param_count, tensor_groups

# Achieved bandwidth is a fraction of the datasheet peak.
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


def compute_dtype(gpu: GPU, weight_format: str) -> str:
    """The ``dense_tflops`` key a decode matmul runs at for ``weight_format`` on ``gpu``: its
    native tensor-core type where the GPU has it, else bf16 (fp16 before Ampere), the type
    dequantized weights are multiplied in."""
    native = WEIGHT_FORMATS[weight_format].native_type if weight_format in WEIGHT_FORMATS else None
    if native and gpu.supports(native) and throughput_key(native) in gpu.dense_tflops:
        return throughput_key(native)
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
