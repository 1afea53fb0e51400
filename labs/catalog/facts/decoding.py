"""Fact functions for positions and token choice (issue 23, "Breadth"): RoPE wavelengths,
Llama 3.1's frequency bands and YaRN's attention factor; sampling with temperature,
min-p, top-k and top-p in vLLM's order. Pure Python: no torch (the tests compare with
Transformers' RoPE initialisers and logits warpers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labs.catalog.models import get_model


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


DECODING_FACTS: dict[str, Callable[..., float | int]] = {
    "rope_wavelength_tokens": rope_wavelength_tokens,
    "llama3_rope_pairs": llama3_rope_pairs,
    "yarn_attention_factor": yarn_attention_factor,
    "sampling_probability": sampling_probability,
}
