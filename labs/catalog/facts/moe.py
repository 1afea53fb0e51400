"""Fact functions for mixture-of-experts traffic (issue 23, "Breadth"): all-to-all bytes and
time under expert parallelism, experts a batch wakes, and load balance as vLLM's EPLB
logs it. MoE shapes come from the registry (Mixtral) or from the table below, each row
copied from the model's ``config.json`` (URL in ``source_url``). Pure Python: no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labs.catalog import roofline
from labs.catalog.models import get_model

BYTES_PER_GB = 10**9


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
    independent, for the table's models as well as the registry's (the ``facts``
    function ``expected_active_experts`` covers registry models only). Decode at small
    batch reads only these experts."""
    shape = moe_shape(model)
    return roofline.expected_distinct_experts(shape.experts, shape.top_k, tokens)


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


MOE_FACTS: dict[str, Callable[..., float | int]] = {
    "moe_all_to_all_bytes_per_token": moe_all_to_all_bytes_per_token,
    "moe_all_to_all_seconds": moe_all_to_all_seconds,
    "moe_expected_active_experts": moe_expected_active_experts,
    "moe_balancedness": moe_balancedness,
}
