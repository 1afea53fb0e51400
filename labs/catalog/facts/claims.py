"""Fact kinds for yes/no claims and thresholds that prose used to state unchecked.

The content audit (issue 15) found claims that no fact covered: "141.1 GB of
bf16 weights do not fit on a 141 GB H200" (the driver reports 150.75e9 bytes),
"bf16 on a T4", "a cast to e4m3fn turns NaN at 480". Each function here turns
one such claim into a number ``labs.catalog.facts.evaluate`` can check:

- ``weights_fit_on_gpu`` / ``gpu_free_bytes_after_weights`` compare one GPU's
  share of the weights with the memory the **driver reports** (nvidia-smi's
  ``memory.total``), never with the marketed "GB" read as 10^9 bytes.
- ``gpu_has_tensor_type`` reads the registry's tensor-core input types.
- ``fp8_overflow_threshold`` is the magnitude above which a round-to-nearest,
  non-saturating cast leaves the finite range (NaN for e4m3fn, inf for e5m2).

Boolean kinds return 1 (yes) or 0 (no). On a single-choice quiz item they key
the answer: choice 0 starts with "No", choice 1 with "Yes" (``app/content_rules``
enforces the convention), so ``answer`` equals the fact's value.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from typing import Any

from labs.catalog import formats, memory
from labs.catalog.facts.floats import FLOAT_DTYPES
from labs.catalog.gpus import get_gpu
from labs.catalog.models import get_model, tensor_groups

BYTES_PER_GB = 10**9
BITS_PER_BYTE = 8
LENGTH_PREFIX_BYTES = 8  # safetensors: u64 little-endian length of the JSON header

# Fact functions whose value is 1 (the claim holds) or 0 (it does not).
BOOLEAN_FACTS = frozenset({"weights_fit_on_gpu", "gpu_has_tensor_type"})


def gpu_free_bytes_after_weights(
    model: str, weight_format: str, gpu: str, tensor_parallel: int = 1
) -> int:
    """Driver-reported device memory minus one GPU's share of the weights, in bytes.

    Negative when the weights alone do not fit. Llama 3.1 70B in bf16 on one
    H200: 143,771 MiB (150.75e9 bytes) − 141.1e9 bytes = 9.65e9 bytes (8.98 GiB).
    CUDA context, activations and KV cache still have to come out of this.
    """
    if weight_format not in formats.WEIGHT_FORMATS:
        known = ", ".join(formats.WEIGHT_FORMATS)
        raise KeyError(f"unknown weight_format {weight_format!r}; known: {known}")
    spec = get_model(model)
    problem = memory.valid_tensor_parallel(spec, tensor_parallel)
    if problem:
        raise ValueError(f"tensor_parallel {tensor_parallel} for {model}: {problem}")
    weights = memory.weight_bytes(spec, weight_format, tensor_parallel)
    return get_gpu(gpu).visible_memory_bytes - weights


def weights_fit_on_gpu(
    model: str,
    weight_format: str,
    gpu: str,
    tensor_parallel: int = 1,
    reserve_gb: float = 0.0,
) -> int:
    """1 if one GPU's share of the weights plus ``reserve_gb`` (GB, 10^9 bytes) fits, else 0.

    Capacity is what the driver reports (``nvidia_smi_mib`` × 2^20), the
    figure an out-of-memory error is measured against; the marketed "141 GB"
    read as 141e9 bytes understates an H200 by 9.75e9 bytes.
    """
    free = gpu_free_bytes_after_weights(model, weight_format, gpu, tensor_parallel)
    return int(free >= reserve_gb * BYTES_PER_GB)


def largest_block_aligned_tensor_parallel(model: str, weight_format: str, limit: int = 64) -> int:
    """Largest TP size (≤ ``limit``) the model admits whose shards hold whole scale blocks.

    TP must divide the attention heads and MLP width (``labs.catalog.memory``'s rules);
    a block format must also not split a group. Qwen2.5-72B in int4 (group
    128) → 1: its 29,568-wide MLP is 231 groups, and every TP size it admits
    above 1 is a power of two (it must divide the 64 heads), which 231 is not
    divisible by.
    """
    spec = get_model(model)
    best = 1
    for tp in memory.valid_tensor_parallel_sizes(spec, limit):
        if not memory.block_alignment_problems(spec, weight_format, tp):
            best = max(best, tp)
    return best


def projection_bits_per_weight(model: str, weight_format: str) -> float:
    """Stored bits per projection weight of a registry model, its scales included.

    The average over the model's real projection shapes, not over the
    format-support lab's 4096 × 4096 reference matrix: per-row scales cost
    32 / row length, so Llama 3.1 70B in fp8 → 8.003 (8,192- and 28,672-wide
    rows), where the reference matrix gives 8.008.
    """
    if weight_format not in formats.WEIGHT_FORMATS:
        known = ", ".join(formats.WEIGHT_FORMATS)
        raise KeyError(f"unknown weight_format {weight_format!r}; known: {known}")
    spec = get_model(model)
    groups = [g for g in tensor_groups(spec) if g.linear]
    stored = sum(memory.group_bytes(spec, g, weight_format) for g in groups)
    return stored * BITS_PER_BYTE / sum(g.rows * g.cols * g.count for g in groups)


def gpu_has_tensor_type(gpu: str, tensor_type: str) -> int:
    """1 if the GPU's tensor cores take ``tensor_type`` inputs (registry), else 0.

    T4 and V100 → 0 for ``bf16``; A100 → 1; H100 → 0 for ``int4``.
    """
    return int(get_gpu(gpu).supports(tensor_type))


def fp8_overflow_threshold(dtype: str) -> float:
    """Magnitude above which a non-saturating round-to-nearest-even cast is not finite.

    Halfway between the largest finite value and the next code: e4m3fn → 464
    (448 + 32 / 2; 464 itself ties to 448, anything above rounds to the NaN
    code S.1111.111), e5m2 → 61440 (57344 + 8192 / 2; the tie rounds to even,
    which is inf, so 61440 itself overflows).
    """
    if dtype not in ("fp8_e4m3", "fp8_e5m2"):
        raise KeyError(f"fp8_overflow_threshold: dtype must be fp8_e4m3 or fp8_e5m2, not {dtype!r}")
    enc = FLOAT_DTYPES[dtype]
    ulp_at_max = 2.0 ** (_exponent_of(enc.max) - enc.mantissa_bits)
    return enc.max + ulp_at_max / 2


SAFETENSORS_WHAT = ("length_prefix", "header_length", "data_bytes", "file_bytes")
SAFETENSORS_DTYPES = {
    "BF16": "bfloat16",
    "F16": "float16",
    "F32": "float32",
    "I8": "int8",
    "U8": "uint8",
}


def safetensors_layout(
    tensors: Mapping[str, Mapping[str, Any]],
    what: str,
    metadata: Mapping[str, str] | None = None,
) -> int:
    """Bytes of one part of a safetensors file, written by the real ``safetensors`` library.

    ``tensors`` maps a name to ``{dtype: BF16|F16|F32|I8|U8, shape: [...]}``.
    ``what``: ``length_prefix`` (the u64 before the JSON: always 8),
    ``header_length`` (N, the JSON header the prefix announces, padding
    included), ``data_bytes`` (the tensor buffer) or ``file_bytes``
    (8 + N + data). Prose that says "the header takes X bytes" must say which.
    """
    import torch
    from safetensors.torch import save

    if what not in SAFETENSORS_WHAT:
        raise KeyError(f"unknown part {what!r}; known: {', '.join(SAFETENSORS_WHAT)}")
    state = {
        name: torch.zeros(
            [int(d) for d in spec["shape"]], dtype=getattr(torch, SAFETENSORS_DTYPES[spec["dtype"]])
        )
        for name, spec in tensors.items()
    }
    blob = save(state, metadata=dict(metadata) if metadata else None)
    header_length = struct.unpack("<Q", blob[:LENGTH_PREFIX_BYTES])[0]
    return {
        "length_prefix": LENGTH_PREFIX_BYTES,
        "header_length": header_length,
        "data_bytes": len(blob) - LENGTH_PREFIX_BYTES - header_length,
        "file_bytes": len(blob),
    }[what]


def _exponent_of(x: float) -> int:
    """Unbiased binary exponent of a positive normal float (448 → 8)."""
    return math.frexp(x)[1] - 1


CLAIM_FACTS: dict[str, Callable[..., float | int]] = {
    "gpu_free_bytes_after_weights": gpu_free_bytes_after_weights,
    "weights_fit_on_gpu": weights_fit_on_gpu,
    "gpu_has_tensor_type": gpu_has_tensor_type,
    "fp8_overflow_threshold": fp8_overflow_threshold,
    "safetensors_layout": safetensors_layout,
    "largest_block_aligned_tensor_parallel": largest_block_aligned_tensor_parallel,
    "projection_bits_per_weight": projection_bits_per_weight,
}


# --- helper content-fix (issue 23): occupancy and launch limits ----------------
# The hardware cards stated occupancy percentages, blocks per SM and launch
# failures ("1,024 threads × 72 registers") that no fact checked. Per-SM and
# per-block limits by compute capability, from the CUDA C++ Programming Guide,
# "Features and Technical Specifications" (Table: technical specifications per
# compute capability): resident warps, resident blocks, shared memory per SM and
# the opt-in maximum per block, both in KiB. Every listed capability has 65,536
# 32-bit registers per SM and per block and at most 255 per thread.
SM_LIMITS: dict[float, tuple[int, int, int, int]] = {
    7.0: (64, 32, 96, 96),
    7.5: (32, 16, 64, 64),
    8.0: (64, 32, 164, 163),
    8.6: (48, 16, 100, 99),
    8.9: (48, 24, 100, 99),
    9.0: (64, 32, 228, 227),
    10.0: (64, 32, 228, 227),
}
REGISTERS_PER_SM = 65_536
REGISTERS_PER_BLOCK = 65_536
MAX_REGISTERS_PER_THREAD = 255
MAX_THREADS_PER_BLOCK = 1_024
WARP_SIZE = 32
REGISTER_ALLOCATION_UNIT = 256  # registers are allocated per warp in chunks of 256
RESERVED_SHARED_PER_BLOCK = 1_024  # bytes the system reserves per resident block from 8.0 on
OCCUPANCY_WHAT = ("occupancy", "blocks_per_sm", "warps_per_sm", "launches")


def occupancy(
    gpu: str,
    threads_per_block: int,
    registers_per_thread: int = 32,
    shared_bytes_per_block: int = 0,
    what: str = "occupancy",
) -> float:
    """Theoretical occupancy of a kernel on one SM of ``gpu``, as Nsight Compute and
    cudaOccupancyMaxActiveBlocksPerMultiprocessor compute it: blocks per SM is the least of
    the block-slot, warp-slot, register and shared-memory limits. ``what``:
    ``occupancy`` (resident warps / maximum, 0–1), ``blocks_per_sm``, ``warps_per_sm``, or
    ``launches`` (1 if one block fits the per-block limits at all, else 0: "too many
    resources requested for launch"). H100, 256 threads, 100 KiB shared → 2 blocks, 0.25."""
    if what not in OCCUPANCY_WHAT:
        raise KeyError(f"unknown quantity {what!r}; known: {', '.join(OCCUPANCY_WHAT)}")
    cc = get_gpu(gpu).compute_capability
    if cc not in SM_LIMITS:
        raise KeyError(f"no SM limits for compute capability {cc}; known: {sorted(SM_LIMITS)}")
    max_warps, max_blocks, smem_sm_kib, smem_block_kib = SM_LIMITS[cc]
    warps = math.ceil(threads_per_block / WARP_SIZE)
    per_warp = math.ceil(registers_per_thread * WARP_SIZE / REGISTER_ALLOCATION_UNIT)
    registers_per_warp = per_warp * REGISTER_ALLOCATION_UNIT
    launches = (
        0 < threads_per_block <= MAX_THREADS_PER_BLOCK
        and registers_per_thread <= MAX_REGISTERS_PER_THREAD
        and registers_per_warp * warps <= REGISTERS_PER_BLOCK
        and shared_bytes_per_block <= smem_block_kib * 1024
    )
    if what == "launches":
        return int(launches)
    if not launches:
        return 0
    reserved = RESERVED_SHARED_PER_BLOCK if cc >= 8.0 else 0
    limits = [
        max_blocks,
        max_warps // warps,
        REGISTERS_PER_SM // (registers_per_warp * warps) if registers_per_thread else max_blocks,
        smem_sm_kib * 1024 // (shared_bytes_per_block + reserved)
        if shared_bytes_per_block
        else max_blocks,
    ]
    blocks = min(limits)
    return {
        "blocks_per_sm": blocks,
        "warps_per_sm": blocks * warps,
        "occupancy": blocks * warps / max_warps,
    }[what]


CLAIM_FACTS["occupancy"] = occupancy
