"""Fact functions for serving, long-context and MoE-traffic cards (issue 23, "Breadth").

Each function turns one kind of number a card states into arithmetic the test suite
can check: KV bytes with sliding windows, context parallelism and offload tiers; the
time to move a KV cache over a link or to recompute it; the chunk size ring attention
needs to hide its transfers; all-to-all bytes per token under expert parallelism;
expert load balance as vLLM logs it; RoPE wavelengths and Llama 3.1's frequency
bands; sampling with temperature, top-k, top-p and min-p; structured-output bitmasks;
LoRA adapter bytes.

Shapes come from ``labs.models`` (the registry) or, for attention layouts and MoE
routers the registry cannot describe, from the small tables below, each row copied
from the model's ``config.json`` (URL in ``source_url``). Pure Python: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labs import memory
from labs.facts_hardware import peak_flops
from labs.models import (
    KV_TENSORS_PER_LAYER,
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
    if kv_dtype not in memory.KV_DTYPE_BYTES:
        raise KeyError(f"unknown kv_dtype {kv_dtype!r}; known: {', '.join(memory.KV_DTYPE_BYTES)}")
    if min(context_tokens, batch, context_parallel) < 1:
        raise ValueError("context_tokens, batch and context_parallel must be at least 1")
    layers, heads, head_dim, window, every = _layer_shape(model, tensor_parallel)
    window = window if sliding_window is None else sliding_window
    every = every if global_every is None else global_every
    per_token_layer = KV_TENSORS_PER_LAYER * heads * head_dim * memory.KV_DTYPE_BYTES[kv_dtype]
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
    if kv_dtype not in memory.KV_DTYPE_BYTES:
        raise KeyError(f"unknown kv_dtype {kv_dtype!r}")
    send_bytes_per_token = KV_TENSORS_PER_LAYER * spec.kv_dim * memory.KV_DTYPE_BYTES[kv_dtype]
    flops_per_token_pair = ATTENTION_MATMULS * FLOPS_PER_MAC * spec.q_dim
    return peak_flops(gpu, dtype) * send_bytes_per_token / (flops_per_token_pair * link_gb_s * 1e9)


# --- Mixture-of-experts traffic --------------------------------------------------


@dataclass(frozen=True)
class MoeShape:
    """What a token carries through the MoE layers: ``hidden`` values to each of ``top_k``
    routed experts in each of ``moe_layers`` layers (shared experts stay local)."""

    id: str
    hidden: int
    moe_layers: int
    experts: int
    top_k: int
    shared_experts: int
    source_url: str


MOE_SHAPES: dict[str, MoeShape] = {
    row.id: row
    for row in (
        # 61 layers, first_k_dense_replace 3; n_routed_experts 256, num_experts_per_tok 8.
        MoeShape(
            "deepseek-v3",
            hidden=7168,
            moe_layers=58,
            experts=256,
            top_k=8,
            shared_experts=1,
            source_url="https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
        ),
        # 48 layers, every one MoE (decoder_sparse_step 1); 128 experts, 8 per token.
        MoeShape(
            "qwen3-30b-a3b",
            hidden=2048,
            moe_layers=48,
            experts=128,
            top_k=8,
            shared_experts=0,
            source_url="https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
        ),
    )
}

# Bytes per value a dispatch or combine moves. DeepEP's FP8 dispatch adds one fp32
# scale per 128 channels, hence 1 + 4/128.
A2A_DTYPE_BYTES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp8_block128": 1.0 + 4 / 128}


def moe_shape(model: str) -> MoeShape:
    """The MoE shape of a table row or a registry MoE model (Mixtral)."""
    if model in MOE_SHAPES:
        return MOE_SHAPES[model]
    spec = get_model(model)
    if not spec.is_moe:
        raise ValueError(f"{model} is a dense model: it has no experts")
    return MoeShape(
        spec.id,
        spec.hidden_size,
        spec.num_layers,
        spec.num_experts,
        spec.num_experts_per_token,
        0,
        spec.source_url,
    )


def moe_all_to_all_bytes_per_token(
    model: str,
    dispatch_dtype: str = "bf16",
    combine_dtype: str = "bf16",
    expert_parallel: int = 0,
    tokens: int = 1,
) -> float:
    """Bytes ``tokens`` tokens send through expert-parallel all-to-all, over every MoE layer.

    Dispatch sends each token's hidden vector to each of its top-k experts, combine brings
    each expert's output back: tokens · moe_layers · k · hidden · (dispatch + combine bytes).
    ``expert_parallel`` = N scales by (N − 1)/N, the share of uniformly routed copies whose
    expert lives on another GPU; 0 counts every copy (the upper bound).
    """
    shape = moe_shape(model)
    for name in (dispatch_dtype, combine_dtype):
        if name not in A2A_DTYPE_BYTES:
            raise KeyError(f"unknown dtype {name!r}; known: {', '.join(A2A_DTYPE_BYTES)}")
    per_copy = shape.hidden * (A2A_DTYPE_BYTES[dispatch_dtype] + A2A_DTYPE_BYTES[combine_dtype])
    remote = 1.0 if expert_parallel == 0 else (expert_parallel - 1) / expert_parallel
    return tokens * shape.moe_layers * shape.top_k * per_copy * remote


def moe_all_to_all_seconds(
    model: str,
    tokens: int,
    gb_per_s: float,
    dispatch_dtype: str = "bf16",
    combine_dtype: str = "bf16",
    expert_parallel: int = 0,
) -> float:
    """Seconds one GPU's ``tokens`` tokens spend in dispatch and combine at ``gb_per_s``
    (1e9 B/s), if nothing overlaps them with compute."""
    if gb_per_s <= 0:
        raise ValueError("gb_per_s must be positive")
    moved = moe_all_to_all_bytes_per_token(
        model, dispatch_dtype, combine_dtype, expert_parallel, tokens
    )
    return moved / (gb_per_s * BYTES_PER_GB)


def moe_expected_active_experts(model: str, tokens: int) -> float:
    """Distinct routed experts per layer that ``tokens`` tokens touch, routing uniform and
    independent: E · (1 − (1 − k/E)^tokens). Decode at small batch reads only these."""
    shape = moe_shape(model)
    e, k = shape.experts, shape.top_k
    return e * (1 - (1 - k / e) ** tokens)


def moe_balancedness(
    loads: Sequence[float], gpus: int, redundant: int = 0, placement: str = "linear"
) -> float:
    """Mean ÷ max tokens per GPU for one MoE layer, the figure vLLM's EPLB logs.

    ``loads``: tokens routed to each expert. ``linear`` places experts contiguously
    (vLLM's default placement); ``eplb`` follows DeepSeek's EPLB: give each of
    ``redundant`` extra slots to the expert with the highest load per replica, then pack
    replicas heaviest first onto the GPU with the least load that still has a free slot.
    """
    slots = len(loads) + redundant
    if gpus < 1 or slots % gpus:
        raise ValueError(f"{slots} expert slots do not split evenly over {gpus} GPUs")
    if placement == "linear":
        if redundant:
            raise ValueError("linear placement has no redundant experts")
        per_gpu = len(loads) // gpus
        gpu_loads = [sum(loads[g * per_gpu : (g + 1) * per_gpu]) for g in range(gpus)]
    elif placement == "eplb":
        gpu_loads = _eplb_pack(loads, gpus, redundant)
    else:
        raise KeyError(f"unknown placement {placement!r}; known: linear, eplb")
    peak = max(gpu_loads)
    return sum(gpu_loads) / gpus / peak if peak > 0 else 0.0


def _eplb_pack(loads: Sequence[float], gpus: int, redundant: int) -> list[float]:
    replicas = [1] * len(loads)
    for _ in range(redundant):
        heaviest = max(range(len(loads)), key=lambda e: loads[e] / replicas[e])
        replicas[heaviest] += 1
    pieces = sorted(
        (loads[e] / replicas[e] for e in range(len(loads)) for _ in range(replicas[e])),
        reverse=True,
    )
    capacity = len(pieces) // gpus
    gpu_loads, filled = [0.0] * gpus, [0] * gpus
    for piece in pieces:
        open_gpus = [g for g in range(gpus) if filled[g] < capacity]
        target = min(open_gpus, key=lambda g: gpu_loads[g])
        gpu_loads[target] += piece
        filled[target] += 1
    return gpu_loads


# --- Positions: RoPE ----------------------------------------------------------------


@dataclass(frozen=True)
class Llama3RopeScaling:
    """``rope_scaling`` of Llama 3.1's config.json (rope_type "llama3")."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


# rope_theta of each registry model's config.json.
ROPE_THETA: dict[str, float] = {
    "llama-3.1-8b": 500_000.0,
    "llama-3.1-70b": 500_000.0,
    "llama-3.1-405b": 500_000.0,
    "mistral-7b": 1_000_000.0,
    "mixtral-8x7b": 1_000_000.0,
    "qwen2.5-7b": 1_000_000.0,
    "qwen2.5-72b": 1_000_000.0,
}
LLAMA3_SCALING = Llama3RopeScaling(8.0, 1.0, 4.0, 8192)
# YaRN's attention temperature: √(1/t) = 0.1 · ln(s) + 1 (Peng et al., eq. 22).
YARN_MSCALE_COEFFICIENT = 0.1
ROPE_BANDS = ("unchanged", "blended", "scaled")


def rope_wavelength_tokens(model: str, pair: int) -> float:
    """Wavelength in tokens of rotation pair ``pair`` (0 … head_dim/2 − 1): 2π · θ^(2·pair/head_dim)."""
    spec = get_model(model)
    if not 0 <= pair < spec.head_dim // 2:
        raise ValueError(f"pair must be in 0..{spec.head_dim // 2 - 1}")
    return 2 * math.pi * ROPE_THETA[spec.id] ** (2 * pair / spec.head_dim)


def llama3_rope_pairs(model: str, band: str) -> int:
    """How many rotation pairs Llama 3.1's rope scaling leaves ``unchanged`` (wavelength
    below original/high_freq_factor = 2,048 tokens), divides by the factor 8 (``scaled``:
    above original/low_freq_factor = 8,192) or ``blended`` between the two."""
    if band not in ROPE_BANDS:
        raise KeyError(f"unknown band {band!r}; known: {', '.join(ROPE_BANDS)}")
    if not model.startswith("llama-3.1"):
        raise ValueError(f"{model} does not use Llama 3.1's rope scaling")
    s = LLAMA3_SCALING
    high = s.original_max_position_embeddings / s.high_freq_factor
    low = s.original_max_position_embeddings / s.low_freq_factor
    counts = dict.fromkeys(ROPE_BANDS, 0)
    for pair in range(get_model(model).head_dim // 2):
        wavelength = rope_wavelength_tokens(model, pair)
        key = "unchanged" if wavelength < high else "scaled" if wavelength > low else "blended"
        counts[key] += 1
    return counts[band]


def yarn_attention_factor(factor: float) -> float:
    """YaRN's multiplier on cos/sin for a context extended ``factor`` times: 0.1 · ln(s) + 1.
    Both q and k carry it, so attention logits grow by its square."""
    if factor < 1:
        raise ValueError("factor must be at least 1")
    return YARN_MSCALE_COEFFICIENT * math.log(factor) + 1


# --- Sampling ---------------------------------------------------------------------


def sampling_probability(
    logits: Sequence[float],
    index: int = 0,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    what: str = "probability",
) -> float:
    """Probability that token ``index`` is sampled (``what="probability"``), or how many
    tokens keep a non-zero probability (``what="kept"``), in vLLM's V1 sampler order:
    divide logits by the temperature, drop tokens below ``min_p`` × the top probability,
    keep the ``top_k`` largest, then the smallest head whose mass reaches ``top_p``
    (a token is dropped when the mass of tokens ranked below it and itself is at most
    1 − top_p), renormalise. ``top_k`` 0 and ``top_p`` 1 disable those steps.
    """
    if temperature <= 0:
        raise ValueError("temperature must be positive (0 means greedy: no sampling)")
    scaled = [x / temperature for x in logits]
    alive = [True] * len(scaled)
    if min_p > 0:
        probs = _probabilities(scaled, alive)
        alive = [a and p >= min_p * max(probs) for a, p in zip(alive, probs, strict=True)]
    order = sorted(range(len(scaled)), key=lambda i: scaled[i])  # ascending, as vLLM sorts
    if top_k:
        for i in order[: max(0, len(order) - top_k)]:
            alive[i] = False
    if top_p < 1:
        probs = _probabilities(scaled, alive)
        cumulative = 0.0
        for rank, i in enumerate(order):
            cumulative += probs[i]
            if cumulative <= 1 - top_p and rank < len(order) - 1:
                alive[i] = False
    probs = _probabilities(scaled, alive)
    if what == "kept":
        return float(sum(alive))
    if what != "probability":
        raise KeyError(f"unknown quantity {what!r}; known: probability, kept")
    return probs[index]


def _probabilities(values: Sequence[float], alive: Sequence[bool]) -> list[float]:
    top = max(v for v, a in zip(values, alive, strict=True) if a)
    weights = [math.exp(v - top) if a else 0.0 for v, a in zip(values, alive, strict=True)]
    total = sum(weights)
    return [w / total for w in weights]


# --- Structured output and LoRA -----------------------------------------------------


def token_bitmask_bytes(model: str, batch: int = 1) -> int:
    """Bytes of the per-step token bitmask for ``batch`` constrained sequences: one bit per
    vocabulary entry of the model's config, packed 32 to an int32 (Llama 3.1 → 16,032)."""
    words = math.ceil(get_model(model).vocab_size / BITMASK_BITS_PER_WORD)
    return batch * words * BITMASK_BYTES_PER_WORD


LORA_TARGETS = {
    "q": "attn_q",
    "k": "attn_k",
    "v": "attn_v",
    "o": "attn_o",
    "gate": "mlp_gate",
    "up": "mlp_up",
    "down": "mlp_down",
}
LORA_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def lora_adapter_bytes(
    model: str,
    rank: int,
    targets: Sequence[str] = tuple(LORA_TARGETS),
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
    unknown = set(targets) - set(LORA_TARGETS)
    if unknown:
        raise KeyError(f"unknown targets {sorted(unknown)}; known: {', '.join(LORA_TARGETS)}")
    kinds = {LORA_TARGETS[t] for t in targets}
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
    "moe_all_to_all_bytes_per_token": moe_all_to_all_bytes_per_token,
    "moe_all_to_all_seconds": moe_all_to_all_seconds,
    "moe_expected_active_experts": moe_expected_active_experts,
    "moe_balancedness": moe_balancedness,
    "rope_wavelength_tokens": rope_wavelength_tokens,
    "llama3_rope_pairs": llama3_rope_pairs,
    "yarn_attention_factor": yarn_attention_factor,
    "sampling_probability": sampling_probability,
    "token_bitmask_bytes": token_bitmask_bytes,
    "lora_adapter_bytes": lora_adapter_bytes,
}
