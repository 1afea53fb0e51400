"""Fact functions for the CUDA-core cards and the kernel-writing lessons (issue 23,
"Breadth": GEMM tiling, reductions, TMA/wgmma, pinned and unified memory, MIG).

Each function turns one kind of number those pages state into arithmetic the test suite
checks: a per-SM limit or SM count of a registry GPU, a roofline time, the DRAM traffic
and wave count of a tiled GEMM, a PCIe transfer, MIG slices, a model's shape, the
registers an MMA accumulator occupies. Occupancy itself is ``labs.catalog.facts.claims.occupancy``;
peak FLOP/s and bandwidth come from ``labs.catalog.facts.hardware``. Pure Python: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import labs.catalog.facts.claims as claims
from labs.catalog.facts.hardware import bandwidth, peak_flops
from labs.catalog.gpus import SM_COUNT, get_gpu
from labs.catalog.models import get_model

KIB = 1024

SM_LIMITS = (
    "sm_count",
    "max_warps",
    "max_threads",
    "max_blocks",
    "registers",
    "shared_memory_bytes",
    "shared_memory_per_block_bytes",
    "reserved_shared_memory_per_block_bytes",
)


def gpu_sm_limit(gpu: str, what: str) -> int:
    """One per-SM limit of a registry GPU's compute capability (``claims.SM_LIMITS``), or
    its SM count: H100 → ``sm_count`` 132, ``shared_memory_per_block_bytes`` 232,448."""
    if what not in SM_LIMITS:
        raise KeyError(f"unknown SM limit {what!r}; known: {', '.join(SM_LIMITS)}")
    cc = get_gpu(gpu).compute_capability
    if what == "sm_count":
        return SM_COUNT[gpu]
    max_warps, max_blocks, smem_sm_kib, smem_block_kib = claims.SM_LIMITS[cc]
    return {
        "max_warps": max_warps,
        "max_threads": max_warps * claims.WARP_SIZE,
        "max_blocks": max_blocks,
        "registers": claims.REGISTERS_PER_SM,
        "shared_memory_bytes": smem_sm_kib * KIB,
        "shared_memory_per_block_bytes": smem_block_kib * KIB,
        "reserved_shared_memory_per_block_bytes": claims.RESERVED_SHARED_PER_BLOCK
        if cc >= 8.0
        else 0,
    }[what]


ROOFLINE_PARTS = ("bound", "compute", "memory")


def roofline_seconds(
    gpu: str, flops: float, bytes_moved: float, dtype: str = "bf16", part: str = "bound"
) -> float:
    """Lower bound on a kernel's time: max(FLOPs / peak of ``dtype``, bytes / bandwidth),
    or one term (``part`` = ``compute`` or ``memory``). ``dtype`` ``fp32`` is the CUDA
    cores. Reading 2^28 fp32 values (1 GiB) on an A100 80 GB: 0.527 ms."""
    if part not in ROOFLINE_PARTS:
        raise KeyError(f"unknown part {part!r}; known: {', '.join(ROOFLINE_PARTS)}")
    compute = flops / peak_flops(gpu, dtype) if flops else 0.0
    memory_time = bytes_moved / bandwidth(gpu)
    return {"bound": max(compute, memory_time), "compute": compute, "memory": memory_time}[part]


GEMM_TRAFFIC = ("bytes", "intensity", "tiles")


def gemm_traffic(
    m: int,
    n: int,
    k: int,
    tile_m: int,
    tile_n: int,
    bytes_per_element: float = 2,
    output_bytes_per_element: float | None = None,
    what: str = "bytes",
) -> float:
    """DRAM traffic of C[m×n] = A[m×k]·B[k×n] when each block computes one tile_m × tile_n
    tile of C and nothing is reused between blocks (no L2 hits): A is read once per column
    of tiles, B once per row of tiles, C written once. ``what``: ``bytes``, ``intensity``
    (2mnk / bytes, FLOP per byte) or ``tiles``. A 1 × 1 tile is the naive kernel."""
    if what not in GEMM_TRAFFIC:
        raise KeyError(f"unknown quantity {what!r}; known: {', '.join(GEMM_TRAFFIC)}")
    out = bytes_per_element if output_bytes_per_element is None else output_bytes_per_element
    tiles_m, tiles_n = math.ceil(m / tile_m), math.ceil(n / tile_n)
    if what == "tiles":
        return tiles_m * tiles_n
    moved = (m * k * tiles_n + k * n * tiles_m) * bytes_per_element + m * n * out
    return moved if what == "bytes" else 2 * m * n * k / moved


WAVE_QUANTITIES = ("waves", "efficiency", "tiles")


def gemm_waves(
    gpu: str, m: int, n: int, tile_m: int, tile_n: int, blocks_per_sm: int = 1, what: str = "waves"
) -> float:
    """How a grid of output tiles fills the GPU: ``waves`` = tiles / (SMs × blocks per SM);
    ``efficiency`` = tiles / (whole waves × slots), the busy fraction when every tile takes
    equally long (1536² in 128² tiles on an H100: 144 tiles, 2 waves, 54.5 %)."""
    if what not in WAVE_QUANTITIES:
        raise KeyError(f"unknown quantity {what!r}; known: {', '.join(WAVE_QUANTITIES)}")
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    if what == "tiles":
        return tiles
    slots = gpu_sm_limit(gpu, "sm_count") * blocks_per_sm
    waves = tiles / slots
    return waves if what == "waves" else tiles / (math.ceil(waves) * slots)


# PCI Express per-lane signalling rates (GT/s) and the 128b/130b encoding of Gen 3–5.
PCIE_GIGATRANSFERS = {3: 8, 4: 16, 5: 32}
PCIE_ENCODING = 128 / 130


def pcie_bandwidth(generation: int, lanes: int = 16) -> float:
    """Bytes per second in one direction of a PCIe link: Gen4 x16 → 31.5e9 (datasheets
    quote both directions together: "64 GB/s")."""
    if generation not in PCIE_GIGATRANSFERS:
        raise KeyError(
            f"PCIe generation must be one of {sorted(PCIE_GIGATRANSFERS)}, not {generation}"
        )
    return PCIE_GIGATRANSFERS[generation] * 1e9 * lanes * PCIE_ENCODING / 8


def pcie_seconds(bytes_moved: float, generation: int, lanes: int = 16) -> float:
    """Seconds to move ``bytes_moved`` one way over a PCIe link at its full per-direction
    rate (pinned host memory; pageable copies are slower): 16.06 GB over Gen4 x16 → 0.51 s."""
    return bytes_moved / pcie_bandwidth(generation, lanes)


# MIG GPU-instance profiles on A100/H100/H200/B200 (NVIDIA MIG User Guide, "Supported
# MIG Profiles"): 7 compute slices and 8 memory slices; a 3g instance takes 4 memory slices.
MIG_MEMORY_SLICES = {1: 1, 2: 2, 3: 4, 4: 4, 7: 8}


def mig_slices(profile: str, kind: str) -> int:
    """Compute or memory slices a MIG profile (``1g`` … ``7g``) takes of 7 and 8."""
    compute = int(profile[:-1]) if profile.endswith("g") and profile[:-1].isdigit() else 0
    if compute not in MIG_MEMORY_SLICES:
        raise KeyError(f"unknown MIG profile {profile!r}; known: 1g, 2g, 3g, 4g, 7g")
    if kind not in ("compute", "memory"):
        raise KeyError(f"kind must be compute or memory, not {kind!r}")
    return compute if kind == "compute" else MIG_MEMORY_SLICES[compute]


MODEL_DIMS = (
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "num_layers",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "num_experts",
    "num_experts_per_token",
)


def model_dim(model: str, field: str) -> int:
    """One shape of a registry model's config.json (Llama 3.1 8B vocab_size → 128,256)."""
    if field not in MODEL_DIMS:
        raise KeyError(f"unknown field {field!r}; known: {', '.join(MODEL_DIMS)}")
    return int(getattr(get_model(model), field))


def mma_accumulator_registers(m: int, n: int, threads: int, accumulator_bytes: int = 4) -> float:
    """32-bit registers per thread that hold an m × n accumulator spread over ``threads``:
    a wgmma m64n256 fp32 tile over a 128-thread warpgroup → 128."""
    return m * n * accumulator_bytes / 4 / threads


KERNEL_FACTS: dict[str, Callable[..., float | int]] = {
    "gpu_sm_limit": gpu_sm_limit,
    "roofline_seconds": roofline_seconds,
    "gemm_traffic": gemm_traffic,
    "gemm_waves": gemm_waves,
    "pcie_bandwidth": pcie_bandwidth,
    "pcie_seconds": pcie_seconds,
    "mig_slices": mig_slices,
    "model_dim": model_dim,
    "mma_accumulator_registers": mma_accumulator_registers,
}
