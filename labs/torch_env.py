"""Lab ``torch-env``: the torch build this worker runs, and what its device runs natively.

Reports what ``python -c "import torch; print(torch.__version__)"`` prints (the
same interpreter and torch the lab itself runs), CUDA and cuDNN versions, the
devices with their compute capability, and which low-precision types the
tensor cores take natively, from the capability table in ``labs.catalog.gpus``.
"""

from __future__ import annotations

import platform
import sys

from pydantic import BaseModel, Field

from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU
from labs.catalog.gpus import GPUS
from labs.quant.cpu import bf16_native

VERSION_COMMAND = 'python -c "import torch; print(torch.__version__)"'
# The three questions learners ask first, and the tensor-core types that answer them.
KEY_TYPES: dict[str, tuple[str, ...]] = {
    "bf16": ("bf16",),
    "fp8": ("fp8_e4m3", "fp8_e5m2"),
    "fp4": ("fp4", "nvfp4", "mxfp4"),
}


class TorchEnvParams(LabParams):
    """torch-env takes no parameters."""


class DeviceInfo(BaseModel):
    index: int
    name: str
    compute_capability: str
    architecture: str | None = Field(None, description="From the nearest known capability")
    total_memory_bytes: int
    multiprocessors: int
    tensor_core_types: list[str]
    native: dict[str, bool] = Field(description="bf16, fp8, fp4: run natively on the tensor cores")


class TorchEnvResult(LabResult):
    version_command: str
    version_output: str
    python: str
    cuda_build: str | None = Field(
        description="CUDA version torch was built with; None for a CPU build"
    )
    cuda_available: bool
    cudnn_version: int | None
    device_count: int
    devices: list[DeviceInfo]
    cpu_capability: str
    cpu_native: dict[str, bool]
    threads: int
    finding: str


def native_types(major: int, minor: int) -> tuple[str | None, tuple[str, ...]]:
    """(architecture, tensor-core input types) for a compute capability, from the
    GPU registry entry with the highest capability not above it (sm_86 → Ampere,
    sm_120 → Blackwell). Below Volta: no tensor cores."""
    cc = major + minor / 10
    known = sorted((g.compute_capability, g.architecture, g.tensor_types) for g in GPUS.values())
    best: tuple[str | None, tuple[str, ...]] = (None, ())
    for cap, arch, types in known:
        if cap <= cc + 1e-9:
            best = (arch, types)
    return best


def _key_support(types: tuple[str, ...] | list[str]) -> dict[str, bool]:
    return {k: any(t in types for t in names) for k, names in KEY_TYPES.items()}


def run(params: TorchEnvParams, ctx: Context) -> TorchEnvResult:
    ctx.progress(0.1, "torch and its CUDA devices")
    return inspect_torch()


def _devices() -> list[DeviceInfo]:
    import torch

    devices: list[DeviceInfo] = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        arch, types = native_types(p.major, p.minor)
        devices.append(
            DeviceInfo(
                index=i,
                name=p.name,
                compute_capability=f"{p.major}.{p.minor}",
                architecture=arch,
                total_memory_bytes=p.total_memory,
                multiprocessors=p.multi_processor_count,
                tensor_core_types=list(types),
                native=_key_support(types),
            )
        )
    return devices


def _finding(devices: list[DeviceInfo], cpu_native: dict[str, bool]) -> str:
    import torch

    if devices:
        d = devices[0]
        native = [k for k, ok in d.native.items() if ok] or ["none of bf16, fp8, fp4"]
        return f"torch {torch.__version__} with CUDA {torch.version.cuda}; {d.name} (sm_{d.compute_capability.replace('.', '')}) runs {', '.join(native)} natively."
    if torch.version.cuda:
        return f"torch {torch.__version__} is a CUDA {torch.version.cuda} build, but no GPU is visible to this lab: it runs on the CPU."
    return f"torch {torch.__version__} is a CPU-only build: labs run on the CPU" + (
        ", which computes bf16 natively (AVX512-BF16/AMX)."
        if cpu_native["bf16"]
        else "; bf16 is emulated in fp32 arithmetic."
    )


def inspect_torch() -> TorchEnvResult:
    """The torch build, its CUDA and cuDNN, the visible devices and what they run natively."""
    import torch

    cuda_ok = torch.cuda.is_available()
    devices = _devices() if cuda_ok else []
    cudnn = (
        torch.backends.cudnn.version() if cuda_ok and torch.backends.cudnn.is_available() else None
    )
    cpu_native = {"bf16": bf16_native(), "fp8": False, "fp4": False}
    return TorchEnvResult(
        version_command=VERSION_COMMAND,
        version_output=torch.__version__,
        python=f"{platform.python_version()} ({sys.implementation.name})",
        cuda_build=torch.version.cuda,
        cuda_available=cuda_ok,
        cudnn_version=cudnn,
        device_count=len(devices),
        devices=devices,
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        cpu_native=cpu_native,
        threads=torch.get_num_threads(),
        finding=_finding(devices, cpu_native),
    )


def present(r: TorchEnvResult, params: TorchEnvParams, ctx: Context) -> None:
    """The version command's output, the build table and (with CUDA) the devices table."""
    ctx.log(f"$ {r.version_command}\n{r.version_output}")
    ctx.table(
        "torch build",
        ["item", "value"],
        [
            ["torch", r.version_output],
            ["python", platform.python_version()],
            ["CUDA (build)", r.cuda_build or "none (CPU build)"],
            ["CUDA available", r.cuda_available],
            ["cuDNN", r.cudnn_version],
            ["devices", r.device_count],
            ["CPU capability", r.cpu_capability],
            ["threads", r.threads],
        ],
    )
    if r.devices:
        ctx.table(
            "devices",
            [
                "index",
                "name",
                "compute capability",
                "architecture",
                "memory (GiB)",
                "SMs",
                "bf16",
                "fp8",
                "fp4",
            ],
            [
                [
                    d.index,
                    d.name,
                    d.compute_capability,
                    d.architecture,
                    round(d.total_memory_bytes / 2**30, 1),
                    d.multiprocessors,
                    *(d.native[k] for k in KEY_TYPES),
                ]
                for d in r.devices
            ],
        )


LAB = Lab(
    id="torch-env",
    title="torch environment",
    summary="The torch build on this worker: versions of torch, CUDA and cuDNN, the visible devices with their compute capability, and whether they run bf16, fp8 and fp4 natively.",
    needs_gpu=NeedsGPU.preferred,
    params=TorchEnvParams,
    run=run,
    present=present,
    time_limit_s=60.0,
    memory_limit_mb=1024,
)
