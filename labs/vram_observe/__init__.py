"""Lab ``vram-observe``: watch real memory while a real workload runs.

A small transformer block stack (or a chain of matmuls) runs forward at
several batch sizes and in several dtypes. On a CUDA device the lab records
what ``torch.cuda`` says (allocated, reserved, peak), what the driver says
(``cudaMemGetInfo``; NVML utilization through pynvml or ``nvidia-smi``), and
then doubles the batch until the allocator raises ``OutOfMemoryError`` under a
cap — the out-of-memory point, narrowed by bisection. Then it compares with
the rule ``memory-budget`` uses (weights = parameters × bytes, plus a fixed
runtime allowance) and names the gap: CUDA context, allocator cache, cuBLAS
workspace, activations.

On a CPU there is no VRAM: the lab measures this process's resident memory
(RSS, from ``/proc/self/status``) and says so in its result. It does not look
for an out-of-memory point there (the kernel kills a process, it does not
raise), but it projects one from the measured slope.

Units: bytes; MiB = 2^20 bytes; GB = 1e9 bytes.

``model`` holds the parameters and the result (no torch), ``probe`` the workload and
its measuring tools, ``compute`` the run, ``present`` the page's events and the
headline tiles.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.vram_observe.compute import rss_grows_with_batch, run
from labs.vram_observe.model import MIB, OOM_BISECT_RESOLUTION, TIME_LIMIT_S, Params, Result
from labs.vram_observe.present import headline, present
from labs.vram_observe.probe import fit_line, oom_row, search_oom, weights_estimate

__all__ = [
    "LAB",
    "MIB",
    "OOM_BISECT_RESOLUTION",
    "Params",
    "Result",
    "fit_line",
    "oom_row",
    "rss_grows_with_batch",
    "search_oom",
    "weights_estimate",
]

LAB = Lab(
    id="vram-observe",
    title="Observe VRAM: allocated, reserved, peak and the OOM point",
    summary="Run a small transformer stack at several batch sizes and dtypes, read what torch.cuda "
    "and the driver report, find the batch that runs out of memory, and compare with the "
    "memory-budget estimate to name the gap (CUDA context, allocator cache, workspace). On a CPU "
    "it measures process RSS and says so.",
    needs_gpu=NeedsGPU.preferred,
    params=Params,
    run=run,
    present=present,
    time_limit_s=TIME_LIMIT_S,
    memory_limit_mb=4096,
    numeric_outputs=(
        ("weights_mib", "MiB"),
        ("activation_mib_per_sequence", "MiB"),
        ("largest_batch", "sequences"),
        ("cuda_context_mib", "MiB"),
    ),
    concept=concepts.vram_observe,
    headline=headline,
)
