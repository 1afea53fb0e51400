"""Fact functions for serving and long-context cards (issue 23, "Breadth").

Each function turns one kind of number a card states into arithmetic the test suite
can check: KV bytes with sliding windows, context parallelism and offload tiers; the
time to move a KV cache over a link or to recompute it; the chunk size ring attention
needs to hide its transfers; structured-output bitmasks; LoRA adapter bytes. MoE
traffic lives in ``labs.catalog.facts.moe``, RoPE and sampling in ``labs.catalog.facts.decoding``.

Shapes come from ``labs.catalog.models`` (the registry) or, for attention layouts the registry
cannot describe, from the table below, each row copied from the model's
``config.json`` (URL in ``source_url``). Pure Python: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labs.catalog import formats, memory
from labs.catalog.facts.hardware import peak_flops
from labs.catalog.models import (
    KV_TENSORS_PER_LAYER,
    LORA_TARGET_KINDS,
    ModelConfig,
    active_param_count,
    get_model,
    linear_shapes,
)

BYTES_PER_GB = 10**9
BYTES_PER_GIB = 2**30
FLOPS_PER_MAC = 2
# Q·Kᵀ and P·V: the two matmuls of attention.
ATTENTION_MATMULS = 2
# A structured-output token bitmask packs 32 vocabulary entries per int32 word
# (xgrammar's allocate_token_bitmask, vLLM's StructuredOutputManager).
BITMASK_BITS_PER_WORD = 32
BITMASK_BYTES_PER_WORD = 4


# --- Attention layouts the registry does not hold --------------------------------


@dataclass(frozen=True)
class AttentionLayout:
    """The KV-cache shape of a model with sliding-window layers.

    ``global_every``: every n-th layer (1-based) attends to the full context and the
    others to the last ``sliding_window`` tokens; 0 means every layer is windowed.
    """

    id: str
    layers: int
    kv_heads: int
    head_dim: int
    sliding_window: int
    global_every: int
    source_url: str


LAYOUTS: dict[str, AttentionLayout] = {
    row.id: row
    for row in (
        # sliding_window 4096 on all 32 layers; v0.3 (the registry's mistral-7b) dropped it.
        AttentionLayout(
            "mistral-7b-v0.1",
            layers=32,
            kv_heads=8,
            head_dim=128,
            sliding_window=4096,
            global_every=0,
            source_url="https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json",
        ),
        # sliding_window 1024, sliding_window_pattern 6: layers 6, 12, ... are global.
        AttentionLayout(
            "gemma-3-4b",
            layers=34,
            kv_heads=4,
            head_dim=256,
            sliding_window=1024,
            global_every=6,
            source_url="https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json",
        ),
    )
}


def _layer_shape(model: str, tensor_parallel: int) -> tuple[int, int, int, int, int]:
    """(layers, KV heads on one GPU, head_dim, window, global_every) of a registry model or layout."""
    if model in LAYOUTS:
        row = LAYOUTS[model]
        if tensor_parallel != 1:
            raise ValueError(f"{model}: tensor_parallel is only modelled for registry models")
        return row.layers, row.kv_heads, row.head_dim, row.sliding_window, row.global_every
    spec = get_model(model)
    problem = memory.valid_tensor_parallel(spec, tensor_parallel)
    if problem:
        raise ValueError(f"tensor_parallel {tensor_parallel} for {model}: {problem}")
    heads = memory.kv_heads_per_gpu(spec, tensor_parallel)
    return spec.num_layers, heads, spec.head_dim, 0, 0


def kv_cache_bytes(
    model: str,
    kv_dtype: str,
    context_tokens: int,
    batch: int = 1,
    tensor_parallel: int = 1,
    context_parallel: int = 1,
    sliding_window: int | None = None,
    global_every: int | None = None,
) -> int:
    """Bytes of K and V that one GPU holds for ``batch`` sequences of ``context_tokens``.

    Windowed layers keep only the last ``sliding_window`` tokens; every ``global_every``-th
    layer keeps them all (0: all layers windowed). ``None`` takes the model's own layout
    (registry models have none); ``sliding_window=0`` forces full attention everywhere.
    Tensor parallelism splits (or, above the KV-head count, replicates) heads;
    ``context_parallel`` ranks split the cached tokens of each layer (ring attention,
    vLLM's decode context parallelism), the last rank taking the remainder.
    Llama 3.1 8B, bf16, 131,072 tokens → 17,179,869,184 bytes (16 GiB).
    """
    if kv_dtype not in formats.KV_DTYPE_BYTES:
        raise KeyError(f"unknown kv_dtype {kv_dtype!r}; known: {', '.join(formats.KV_DTYPE_BYTES)}")
    if min(context_tokens, batch, context_parallel) < 1:
        raise ValueError("context_tokens, batch and context_parallel must be at least 1")
    layers, heads, head_dim, window, every = _layer_shape(model, tensor_parallel)
    window = window if sliding_window is None else sliding_window
    every = every if global_every is None else global_every
    per_token_layer = KV_TENSORS_PER_LAYER * heads * head_dim * formats.KV_DTYPE_BYTES[kv_dtype]
    global_layers = layers if window == 0 else (layers // every if every else 0)
    windowed_tokens = min(context_tokens, window) if window else context_tokens
    cached = global_layers * math.ceil(context_tokens / context_parallel) + (
        layers - global_layers
    ) * math.ceil(windowed_tokens / context_parallel)
    return batch * cached * per_token_layer


def kv_tokens_in_capacity(
    model: str,
    kv_dtype: str,
    capacity_gb: float = 0.0,
    capacity_gib: float = 0.0,
    tensor_parallel: int = 1,
) -> int:
    """Whole tokens of KV cache that fit in a tier of ``capacity_gb`` (1e9 B) or ``capacity_gib`` (2^30 B).

    Per-token bytes on one GPU of the TP group (full attention). Llama 3.1 70B, bf16,
    a 512 GiB host-memory tier → 1,677,721 tokens.
    """
    if (capacity_gb > 0) == (capacity_gib > 0):
        raise ValueError("give exactly one of capacity_gb and capacity_gib, positive")
    capacity = capacity_gb * BYTES_PER_GB + capacity_gib * BYTES_PER_GIB
    per_token = kv_cache_bytes(model, kv_dtype, 1, tensor_parallel=tensor_parallel)
    return math.floor(capacity / per_token)


def kv_transfer_seconds(
    model: str, kv_dtype: str, tokens: int, gb_per_s: float, tensor_parallel: int = 1
) -> float:
    """Seconds to move ``tokens`` tokens of one GPU's KV cache at ``gb_per_s`` (1e9 B/s).

    The time a prefill worker needs to ship a prompt's cache to a decode worker, or a
    host-memory tier to hand it back, at the link's full rate (no latency, no overlap).
    """
    if gb_per_s <= 0:
        raise ValueError("gb_per_s must be positive")
    moved = kv_cache_bytes(model, kv_dtype, tokens, tensor_parallel=tensor_parallel)
    return moved / (gb_per_s * BYTES_PER_GB)


def prefill_flops(model: str, tokens: int) -> float:
    """FLOPs of a causal prefill of ``tokens`` tokens: the matmuls of every active weight
    (not the embedding lookup) plus Q·Kᵀ and P·V over each token's predecessors.

    Token t attends to t positions, so attention costs 4 · q_dim · layers · Σt =
    2 · q_dim · layers · T(T + 1).
    """
    spec = get_model(model)
    lookup = 0 if spec.tie_word_embeddings else spec.vocab_size * spec.hidden_size
    matmuls = FLOPS_PER_MAC * (active_param_count(spec) - lookup) * tokens
    attention = (
        ATTENTION_MATMULS * FLOPS_PER_MAC * spec.q_dim * spec.num_layers * tokens * (tokens + 1) / 2
    )
    return matmuls + attention


def prefill_seconds(
    model: str,
    tokens: int,
    gpu: str,
    dtype: str = "bf16",
    efficiency: float = 1.0,
    gpus: int = 1,
) -> float:
    """Lower bound on the time to prefill ``tokens`` tokens on ``gpus`` devices at ``efficiency`` × peak.

    Prefill is compute-bound, so FLOPs / (peak dense FLOP/s of ``dtype``) bounds it from
    below; real kernels reach perhaps 40–70 % of peak (pass it as ``efficiency``).
    ``gpus`` splits the FLOPs evenly (tensor parallelism without its communication).
    """
    if not 0 < efficiency <= 1 or gpus < 1:
        raise ValueError("efficiency must be in (0, 1] and gpus at least 1")
    return prefill_flops(model, tokens) / (peak_flops(gpu, dtype) * efficiency * gpus)


def kv_transfer_breakeven_gb_s(
    model: str,
    tokens: int,
    gpu: str,
    kv_dtype: str = "bf16",
    dtype: str = "bf16",
    efficiency: float = 1.0,
) -> float:
    """Link rate (GB/s per GPU) at which shipping a prompt's KV cache takes as long as
    computing it: KV bytes / prefill time. Above it the transfer hides behind prefill.

    Tensor parallelism divides both the cache and the FLOPs by the same factor, so the
    figure is per GPU whatever the TP degree. It falls as prompts grow, because prefill's
    attention FLOPs grow with the square of the length and the cache only linearly.
    """
    seconds = prefill_seconds(model, tokens, gpu, dtype, efficiency)
    return kv_cache_bytes(model, kv_dtype, tokens) / seconds / BYTES_PER_GB


def ring_attention_overlap_tokens(
    model: str, gpu: str, link_gb_s: float, dtype: str = "bf16", kv_dtype: str = "bf16"
) -> float:
    """Chunk length c at which one ring-attention step's compute hides its K/V transfer.

    Per layer, a rank multiplies its c queries with a peer's c keys and values
    (4 · c² · q_dim FLOPs) while sending c tokens of K and V onward
    (2 · c · kv_dim · bytes). Equal times give c = peak · 2 · kv_dim · bytes / (4 · q_dim · link):
    shorter chunks leave the link as the bottleneck. GQA shrinks kv_dim and so the chunk.
    """
    spec = get_model(model)
    if kv_dtype not in formats.KV_DTYPE_BYTES:
        raise KeyError(f"unknown kv_dtype {kv_dtype!r}")
    send_bytes_per_token = KV_TENSORS_PER_LAYER * spec.kv_dim * formats.KV_DTYPE_BYTES[kv_dtype]
    flops_per_token_pair = ATTENTION_MATMULS * FLOPS_PER_MAC * spec.q_dim
    return peak_flops(gpu, dtype) * send_bytes_per_token / (flops_per_token_pair * link_gb_s * 1e9)


# --- Structured output and LoRA -----------------------------------------------------


def token_bitmask_bytes(model: str, batch: int = 1) -> int:
    """Bytes of the per-step token bitmask for ``batch`` constrained sequences: one bit per
    vocabulary entry of the model's config, packed 32 to an int32 (Llama 3.1 → 16,032)."""
    words = math.ceil(get_model(model).vocab_size / BITMASK_BITS_PER_WORD)
    return batch * words * BITMASK_BYTES_PER_WORD


LORA_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def lora_adapter_bytes(
    model: str,
    rank: int,
    targets: Sequence[str] = tuple(LORA_TARGET_KINDS),
    dtype: str = "bf16",
    adapters: int = 1,
) -> int:
    """Bytes of ``adapters`` LoRA adapters: A (rank × in) and B (out × rank) for every
    targeted matrix of every layer. vLLM reserves ``max_loras`` such slots at
    ``max_lora_rank`` whatever the loaded adapters' ranks. Dense models only (an adapter
    on each expert is a different budget)."""
    spec: ModelConfig = get_model(model)
    if spec.is_moe:
        raise ValueError(f"{model} is MoE: adapters on experts are not modelled")
    unknown = set(targets) - set(LORA_TARGET_KINDS)
    if unknown:
        raise KeyError(f"unknown targets {sorted(unknown)}; known: {', '.join(LORA_TARGET_KINDS)}")
    kinds = {LORA_TARGET_KINDS[t] for t in targets}
    params = sum(rank * (g.rows + g.cols) * g.count for g in linear_shapes(spec) if g.kind in kinds)
    return adapters * params * LORA_DTYPE_BYTES[dtype]


SERVING_FACTS: dict[str, Callable[..., float | int]] = {
    "kv_cache_bytes": kv_cache_bytes,
    "kv_tokens_in_capacity": kv_tokens_in_capacity,
    "kv_transfer_seconds": kv_transfer_seconds,
    "prefill_flops": prefill_flops,
    "prefill_seconds": prefill_seconds,
    "kv_transfer_breakeven_gb_s": kv_transfer_breakeven_gb_s,
    "ring_attention_overlap_tokens": ring_attention_overlap_tokens,
    "token_bitmask_bytes": token_bitmask_bytes,
    "lora_adapter_bytes": lora_adapter_bytes,
}
