"""Functions that content "facts" call, so every number a card states is checked.

A fact in a term card or lesson names one of ``FACTS`` and its arguments; the
test suite calls ``evaluate(fn, args)`` and compares the result with the
stated value. See docs/content-format.md ("Facts") and
docs/models-and-gpus.md (what is counted).

Imports stay cheap: the model and GPU registries are pure Python and
``labs.quant`` (torch) is only imported by the two functions that need it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from labs.catalog import formats, memory, roofline
from labs.catalog.facts.claims import CLAIM_FACTS
from labs.catalog.facts.floats import FLOAT_DTYPES, INT_DTYPE_BITS, FloatEncoding
from labs.catalog.gpus import get_gpu
from labs.catalog.models import active_param_count, get_model
from labs.catalog.models import param_count as _param_count


def bits_per_value(
    format: str, granularity: str | int | None = None, zero_point: bool | None = None
) -> float:
    """Stored bits per element of a ``labs.quant`` format, scales and zero points included.

    Delegates to ``labs.quant.bits_per_value``; an amortised per-tensor scale
    is not included (nvfp4 → 4.5, mxfp4 → 4.25, q4_0 → 4.5).
    """
    from labs import quant

    options: dict[str, Any] = {}
    if granularity is not None:
        options["granularity"] = granularity
    if zero_point is not None:
        options["zero_point"] = zero_point
    return float(quant.bits_per_value(format, **options))


def block_size(format: str) -> int:
    """Elements that share one scale in a ``labs.quant`` format (nvfp4 → 16, mxfp4 → 32)."""
    from labs import quant

    size = quant.FORMATS[format].block_size
    if size is None:
        raise ValueError(f"{format} has no fixed block size (its scale is per tensor or channel)")
    return int(size)


def dtype_max(dtype: str) -> float:
    """Largest finite value: fp8_e4m3 → 448, fp4_e2m1 → 6, int8 → 127."""
    if dtype in INT_DTYPE_BITS:
        return float(2 ** (INT_DTYPE_BITS[dtype] - 1) - 1)
    return _float(dtype).max


def dtype_min_normal(dtype: str) -> float:
    """Smallest positive normal value of a float type: fp16 → 2^-14, fp8_e4m3 → 2^-6."""
    if dtype in INT_DTYPE_BITS:
        raise ValueError(f"{dtype} is an integer type: it has no normal numbers")
    return _float(dtype).min_normal


def dtype_bits(dtype: str) -> int:
    """Bits per value (tf32 counts its 19 significant bits, not its 32-bit storage)."""
    if dtype in INT_DTYPE_BITS:
        return INT_DTYPE_BITS[dtype]
    return _float(dtype).storage_bits


def _float(dtype: str) -> FloatEncoding:
    try:
        return FLOAT_DTYPES[dtype]
    except KeyError:
        known = ", ".join([*FLOAT_DTYPES, *INT_DTYPE_BITS])
        raise KeyError(f"unknown dtype {dtype!r}; known: {known}") from None


def param_count(model: str) -> int:
    """Total parameters of a registry model, all experts counted (Llama 3.1 70B → 70,553,706,496)."""
    return _param_count(get_model(model))


def weight_bytes(model: str, weight_format: str) -> int:
    """Bytes of all weights of a registry model in ``weight_format``.

    Plain dtypes (fp32, bf16, fp16) apply to every tensor: Llama 3.1 70B in
    bf16 → 141,107,412,992 bytes (141.1 GB). Quantized formats quantize the
    projection matrices only and keep embeddings, lm_head, norms, biases and
    routers in bf16; scales are counted (nvfp4: 4.5 bits per quantized value
    plus an fp32 scale per tensor). Same rules as the memory-budget lab.
    """
    _check_weight_format(weight_format)
    return memory.weight_bytes(get_model(model), weight_format)


def kv_bytes_per_token(model: str, kv_dtype: str) -> int:
    """Bytes of K and V per token, all layers (Llama 3.1 70B, bf16 → 327,680)."""
    if kv_dtype not in formats.KV_DTYPE_BYTES:
        raise KeyError(f"unknown kv_dtype {kv_dtype!r}; known: {', '.join(formats.KV_DTYPE_BYTES)}")
    return memory.kv_bytes_per_token(get_model(model), kv_dtype)


def gpu_memory_bytes(gpu: str) -> int:
    """Device memory as marketed, read as decimal GB: H100 → 80e9 bytes."""
    return get_gpu(gpu).memory_bytes


def gpu_visible_memory_bytes(gpu: str) -> int:
    """Device memory as nvidia-smi reports it: H100 → 81,559 MiB = 85,520,809,984 bytes."""
    return get_gpu(gpu).visible_memory_bytes


def gpu_bandwidth(gpu: str) -> float:
    """Peak memory bandwidth in bytes per second: H100 SXM → 3.35e12."""
    return get_gpu(gpu).bandwidth_bytes_per_s


def compute_capability(gpu: str) -> float:
    """CUDA compute capability as a number: H100 → 9.0, L4 → 8.9."""
    return get_gpu(gpu).compute_capability


def _check_weight_format(weight_format: str) -> None:
    if weight_format not in formats.WEIGHT_FORMATS:
        known = ", ".join(formats.WEIGHT_FORMATS)
        raise KeyError(f"unknown weight_format {weight_format!r}; known: {known}")


QUANTIZED_WHAT = ("scale", "code", "dequant", "nbytes", "tensor_scale", "padded")


def quantized(
    format: str,
    values: list[float],
    what: str,
    index: int = 0,
    options: Mapping[str, Any] | None = None,
) -> float:
    """Quantize one row of ``values`` with ``labs.quant`` and read back one number.

    ``what``: ``scale`` (decoded block scale ``index``), ``code`` (element ``index``'s
    code), ``dequant`` (element ``index`` after the round trip), ``nbytes`` (every
    stored byte), ``tensor_scale`` (NVFP4's FP32 per-tensor scale).
    """
    import torch

    from labs.quant import quantize

    if what not in QUANTIZED_WHAT:
        raise KeyError(f"unknown quantity {what!r}; known: {', '.join(QUANTIZED_WHAT)}")
    q = quantize(torch.tensor([values], dtype=torch.float32), format, **dict(options or {}))
    if what == "scale":
        return float(q.scales.flatten()[index])
    if what == "code":
        return float(q.codes.flatten()[index])
    if what == "dequant":
        return float(q.dequantize().flatten()[index])
    if what == "nbytes":
        return float(q.nbytes)
    if what == "padded":
        return float(getattr(q, "padded", 0))
    ts = getattr(q, "tensor_scale", None)
    if ts is None:
        raise KeyError(f"format {format!r} has no tensor scale")
    return float(ts)


_LAB_CACHE: dict[str, dict[str, Any]] = {}


def lab_result(lab: str, key: str, params: Mapping[str, Any] | None = None) -> float:
    """Run a registered lab in this process and read one number from its result.

    ``key`` is a dotted path into the result (``per_gpu.0.total_bytes``); list
    indexes are integers. Results are cached per (lab, params) for the test run.
    """
    import json
    import tempfile

    from labs.base import EventContext
    from labs.registry import get_lab

    spec = get_lab(lab)
    if spec is None:
        raise KeyError(f"unknown lab {lab!r}")
    cache_key = lab + json.dumps(dict(params or {}), sort_keys=True)
    if cache_key not in _LAB_CACHE:
        with tempfile.TemporaryDirectory() as tmp:
            ctx = EventContext(lambda kind, data: None, device="cpu", tmpdir=tmp)
            result = spec.execute(spec.params.model_validate(dict(params or {})), ctx)
        _LAB_CACHE[cache_key] = result.model_dump(mode="json")
    node: Any = _LAB_CACHE[cache_key]
    for part in key.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, bool) or not isinstance(node, int | float):
        raise TypeError(f"{lab} result {key} is {node!r}, not a number")
    return float(node)


FACTS: dict[str, Callable[..., float | int]] = {
    "bits_per_value": bits_per_value,
    "block_size": block_size,
    "dtype_max": dtype_max,
    "dtype_min_normal": dtype_min_normal,
    "dtype_bits": dtype_bits,
    "param_count": param_count,
    "weight_bytes": weight_bytes,
    "kv_bytes_per_token": kv_bytes_per_token,
    "gpu_memory_bytes": gpu_memory_bytes,
    "gpu_visible_memory_bytes": gpu_visible_memory_bytes,
    "gpu_bandwidth": gpu_bandwidth,
    "compute_capability": compute_capability,
    "quantized": quantized,
    "lab_result": lab_result,
    # yes/no claims and thresholds (fits on GPU X, tensor-core type, FP8 overflow)
    **CLAIM_FACTS,
}


def evaluate(fn: str, args: Mapping[str, Any] | None = None) -> float:
    """Call fact ``fn`` with keyword ``args`` and return its value as a float.

    Raises ``KeyError`` for an unknown function or registry id and
    ``TypeError`` for arguments the function does not take, each naming it.
    """
    try:
        func = FACTS[fn]
    except KeyError:
        raise KeyError(f"unknown fact function {fn!r}; known: {', '.join(FACTS)}") from None
    try:
        value = func(**dict(args or {}))
    except TypeError as exc:
        raise TypeError(f"{fn}({dict(args or {})}): {exc}") from None
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{fn}({dict(args or {})}) is not finite: {result}")
    return result


# --- helper content-fix (issue 23): numbers the audit found stated unchecked ---
# Bytes a decode step reads (Marlin's 3.23× is 15.01 / 4.65 GB read, not the
# 16.06 / 5.70 GB stored), a decode step with a prefill chunk in it (chunked
# prefill), KV bytes one GPU holds under tensor parallelism (GQA shards, an MLA
# latent is replicated), Transformer Engine's delayed scale and a format's span.

# DeepSeek's multi-head latent attention caches one latent (kv_lora_rank values)
# plus one shared rotary key (qk_rope_head_dim values) per token and layer.
# From config.json: deepseek-ai/DeepSeek-V3 and deepseek-ai/DeepSeek-V2
# (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json):
# (num_hidden_layers, kv_lora_rank, qk_rope_head_dim).
MLA_CACHE_SHAPES: dict[str, tuple[int, int, int]] = {
    "deepseek-v3": (61, 512, 64),
    "deepseek-v2": (60, 512, 64),
}
STEP_WHAT = ("step", "memory", "compute")


def weight_bytes_read_per_step(
    model: str, weight_format: str, tensor_parallel: int = 1, batch: int = 1
) -> int:
    """Weight bytes one GPU reads in a decode step: the embedding contributes one row per
    sequence (a lookup), the lm_head is read in full, MoE layers only the experts a batch
    of ``batch`` tokens is expected to touch. Llama 3.1 8B at batch 1: bf16 → 15.01e9,
    int4 → 4.65e9 bytes (the stored sizes are 16.06e9 and 5.70e9)."""
    _check_weight_format(weight_format)
    return roofline.weight_bytes_read_per_step(
        get_model(model), weight_format, tensor_parallel, batch
    )


def kv_bytes_per_token_per_gpu(model: str, kv_dtype: str, tensor_parallel: int) -> int:
    """K and V bytes per token that one GPU holds when KV heads are split over
    ``tensor_parallel`` GPUs (replicated once TP exceeds the KV heads): Llama 3.1 405B,
    bf16, TP 8 → 64,512."""
    kv_bytes_per_token(model, kv_dtype)  # validates kv_dtype with its message
    return memory.kv_bytes_per_token(get_model(model), kv_dtype, tensor_parallel)


def mla_kv_bytes_per_token(model: str, kv_dtype: str = "bf16", tensor_parallel: int = 1) -> int:
    """Cache bytes per token of a multi-head-latent-attention model on one GPU:
    layers × (latent + rotary key) × bytes per value. The latent serves every head, so
    tensor parallelism cannot split it: each GPU holds all of it whatever
    ``tensor_parallel`` is (DeepSeek-V3, bf16 → 70,272 at TP 1 and at TP 8)."""
    if model not in MLA_CACHE_SHAPES:
        raise KeyError(f"unknown MLA model {model!r}; known: {', '.join(MLA_CACHE_SHAPES)}")
    if kv_dtype not in formats.KV_DTYPE_BYTES:
        raise KeyError(f"unknown kv_dtype {kv_dtype!r}; known: {', '.join(formats.KV_DTYPE_BYTES)}")
    if tensor_parallel < 1:
        raise ValueError(f"tensor_parallel must be at least 1, not {tensor_parallel}")
    layers, latent, rope = MLA_CACHE_SHAPES[model]
    return round(layers * (latent + rope) * formats.KV_DTYPE_BYTES[kv_dtype])


def decode_step_ms(
    model: str,
    gpu: str,
    batch: int,
    context_tokens: int,
    weight_format: str = "bf16",
    kv_dtype: str = "bf16",
    tensor_parallel: int = 1,
    chunk_tokens: int = 0,
    chunk_offset: int = 0,
    what: str = "step",
) -> float:
    """Milliseconds of one decode step on the fp8-savings lab's roofline (80 % of peak
    bandwidth, peak dense FLOP/s, 2 ms fixed cost), optionally with a prefill chunk of
    ``chunk_tokens`` prompt tokens that starts after ``chunk_offset`` earlier ones.

    The chunk shares the step's weight reads, adds 2 FLOPs per weight per chunk token
    (its tokens look up embeddings and compute no logits), causal attention over the
    prompt so far, and reads the earlier chunks' K and V. ``what``: ``memory`` or
    ``compute`` (each part alone) or ``step`` (the larger plus the fixed cost).
    Llama 3.1 8B, H100, batch 32 at 4,096 tokens: memory 12.01, compute with a
    512-token chunk at offset 0 about 7.8, step 14.01 ms either way."""
    if what not in STEP_WHAT:
        raise KeyError(f"unknown part {what!r}; known: {', '.join(STEP_WHAT)}")
    _check_weight_format(weight_format)
    spec, device = get_model(model), get_gpu(gpu)
    step = roofline.decode_step(
        spec,
        device,
        weight_format=weight_format,
        kv_dtype=kv_dtype,
        tp=tensor_parallel,
        batch=batch,
        context_tokens=context_tokens,
    )
    kv_token = memory.kv_bytes_per_token(spec, kv_dtype, tensor_parallel)
    weights = roofline.weight_bytes_read_per_step(
        spec, weight_format, tensor_parallel, batch + chunk_tokens
    )
    read = weights + step.kv_bytes + (chunk_offset + chunk_tokens) * kv_token
    memory_s = read / (device.bandwidth_bytes_per_s * roofline.DEFAULT_BANDWIDTH_EFFICIENCY)
    vocab_matrices = 1 if spec.tie_word_embeddings else 2
    chunk_params = active_param_count(spec) - vocab_matrices * spec.vocab_size * spec.hidden_size
    causal_pairs = chunk_tokens * chunk_offset + chunk_tokens * (chunk_tokens + 1) / 2
    chunk_flops = (
        roofline.FLOPS_PER_MAC * chunk_params * chunk_tokens
        + roofline.ATTENTION_MATMULS
        * roofline.FLOPS_PER_MAC
        * spec.q_dim
        * spec.num_layers
        * causal_pairs
    ) / tensor_parallel
    peak = device.dense_tflops[roofline.compute_dtype(device, weight_format)] * roofline.TFLOPS
    compute_s = (step.flops + chunk_flops) / peak
    seconds = {
        "memory": memory_s,
        "compute": compute_s,
        "step": max(memory_s, compute_s) + step.overhead_s,
    }[what]
    return seconds * roofline.MS_PER_S


def delayed_scaling_scale(amax: float, dtype: str = "fp8_e4m3", margin: int = 0) -> float:
    """Transformer Engine's delayed-scaling scale in the x / s convention: the FP8
    tensor's largest value is placed at fp8_max / 2^margin, so s = amax · 2^margin /
    fp8_max. A larger margin gives a larger s and more headroom (amax 100, E4M3,
    margin 1 → 0.4464; a value 2× the history's amax still fits)."""
    if amax <= 0:
        raise ValueError(f"amax must be positive, not {amax}")
    return amax * 2.0**margin / dtype_max(dtype)


def expected_active_experts(model: str, batch: int) -> float:
    """Distinct experts per MoE layer a batch of ``batch`` tokens touches if each picks its
    top k of E uniformly: E · (1 − (1 − k/E)^batch). Mixtral 8x7B: 2 at batch 1, 7.2 at 8."""
    return roofline.expected_active_experts(get_model(model), batch)


def dtype_binades(dtype: str) -> float:
    """log2(largest finite / smallest positive normal): the binades a float format's
    normal numbers span (bf16 → 254.0, fp16 → 30.0, fp8_e4m3 → 14.8)."""
    return math.log2(dtype_max(dtype) / dtype_min_normal(dtype))


FACTS.update(
    {
        "weight_bytes_read_per_step": weight_bytes_read_per_step,
        "kv_bytes_per_token_per_gpu": kv_bytes_per_token_per_gpu,
        "mla_kv_bytes_per_token": mla_kv_bytes_per_token,
        "decode_step_ms": decode_step_ms,
        "delayed_scaling_scale": delayed_scaling_scale,
        "expected_active_experts": expected_active_experts,
        "dtype_binades": dtype_binades,
    }
)


# --- Helper cards-serving (issue 23 "Breadth": serving, long context, MoE traffic,
# ROCm and MLX). The functions live in their own modules, which keeps this one small;
# registering them here keeps one FACTS table for the content tests.
from labs.catalog.facts.decoding import DECODING_FACTS  # noqa: E402
from labs.catalog.facts.hardware import HARDWARE_FACTS  # noqa: E402
from labs.catalog.facts.kernels import KERNEL_FACTS  # noqa: E402  (helper cards-cuda: the CUDA core)
from labs.catalog.facts.lowbit import LOWBIT_FACTS  # noqa: E402  (i-quants, codebooks, W4A8, ternary)
from labs.catalog.facts.moe import MOE_FACTS  # noqa: E402
from labs.catalog.facts.serving import SERVING_FACTS  # noqa: E402

for _table in (
    SERVING_FACTS,
    MOE_FACTS,
    DECODING_FACTS,
    HARDWARE_FACTS,
    KERNEL_FACTS,
    LOWBIT_FACTS,
):
    if _clash := FACTS.keys() & _table.keys():  # a silent overwrite would re-key content
        raise RuntimeError(f"fact functions registered twice: {sorted(_clash)}")
    FACTS.update(_table)
