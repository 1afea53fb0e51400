"""What a lab child may use: the limits of one run (``SandboxConfig``), the defaults
every lab gets, how many threads a run's child gets, and the record of which
protections were set up (``Protections``). Plain data, imported by both the code
that sets the protections up (``sandbox``, ``mounts``) and the code that asks for
them (the worker, the fork server)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

MIB = 2**20

# Defaults every lab gets unless its metadata says otherwise.
OUTPUT_LIMIT_BYTES = 1_000_000  # events and printed output stored per run
RESULT_LIMIT_BYTES = 1_000_000  # the final result model, serialised
FILE_SIZE_LIMIT_BYTES = 64 * MIB  # largest file a lab may write (RLIMIT_FSIZE)
TMP_LIMIT_BYTES = 256 * MIB  # the private /tmp tmpfs
NPROC_LIMIT = 64  # tasks (processes and threads) of the sandbox user
NOFILE_LIMIT = 256  # open file descriptors
# torch intra-op threads per child: half the cores per concurrent run, at most this
# many. Small tensors run slower with more threads (thread start-up and spinning
# cost more than the work: 20 ms with 1 thread, 100-500 ms with 2 on 2 cores).
MAX_LAB_THREADS = 4
# Threads a child's chunked work (labs.quant.parallel.map_chunks: quantizing and error
# sums on tensors of two chunks or more) may use: every core per concurrent run, at
# most this many. A lone 4096x4096 run on 2 cores gets both.
MAX_LAB_CPUS = 8
# CPU seconds allowed per wall second per thread, plus slack for start-up, before SIGXCPU.
CPU_SLACK_S = 2

# Environment variables a lab child keeps; everything else (secrets included) goes.
KEEP_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "PYTORCH_CUDA_ALLOC_CONF",
    "LOWBIT_MODELS_DIR",  # labs.lm.models.MODELS_ENV: app settings.models_dir, passed down
)


@dataclass(frozen=True)
class SandboxConfig:
    """Limits for one run. Sizes in bytes, times in seconds."""

    wall_s: float
    memory_bytes: int
    device: str = "cpu"
    user: str = "nobody"
    hide: tuple[str, ...] = ()
    threads: int = 1
    cpus: int = 1  # threads for chunked work (labs.quant.parallel), >= threads
    output_bytes: int = OUTPUT_LIMIT_BYTES
    result_bytes: int = RESULT_LIMIT_BYTES
    file_bytes: int = FILE_SIZE_LIMIT_BYTES
    tmp_bytes: int = TMP_LIMIT_BYTES
    nproc: int = NPROC_LIMIT
    nofile: int = NOFILE_LIMIT
    keep_env: tuple[str, ...] = KEEP_ENV

    @property
    def cpu_s(self) -> int:
        return int(self.wall_s * max(self.threads, self.cpus)) + CPU_SLACK_S


def lab_threads(concurrency: int, wide_ops: bool = False) -> int:
    """torch threads for each of ``concurrency`` simultaneous lab children: half the
    cores a run has (small ops run slower on more threads), or all of them
    (``lab_cpus``) for a lab whose ops are large (``Lab.wide_ops``: a model's forward
    passes over 1024-token windows, 1.8x faster on 2 threads than on 1 here)."""
    if wide_ops:
        return lab_cpus(concurrency)
    return max(1, min(MAX_LAB_THREADS, (os.cpu_count() or 1) // (2 * max(1, concurrency))))


def lab_cpus(concurrency: int) -> int:
    """Threads for the chunked work of each of ``concurrency`` simultaneous children."""
    return max(1, min(MAX_LAB_CPUS, (os.cpu_count() or 1) // max(1, concurrency)))


@dataclass
class Protections:
    items: dict[str, dict[str, Any]] = field(default_factory=dict)

    def set(self, name: str, enabled: bool, detail: str) -> None:
        self.items[name] = {"enabled": enabled, "detail": detail}

    def enabled(self, name: str) -> bool:
        return bool(self.items.get(name, {}).get("enabled"))
