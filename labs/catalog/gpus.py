"""GPU registry: memory, bandwidth, compute capability and tensor-core types.

Numbers are the vendor's datasheet figures (URL in ``source_url``).

Units, explicitly:
- ``memory_gb`` is the capacity *as marketed*. NVIDIA prints "GB"; this
  registry reads it as decimal gigabytes (``memory_bytes = memory_gb × 1e9``),
  which is what a reader of the datasheet computes and a safe floor.
- ``nvidia_smi_mib`` is what ``nvidia-smi --query-gpu=memory.total`` reports
  on the real card, in MiB (2^20 bytes). HBM capacities are binary, so this is
  usually *more* than the decimal reading: an "80 GB" H100 reports 81,559 MiB
  = 85.5e9 bytes. The values were taken from published ``nvidia-smi`` output.
- ``bandwidth_bytes_per_s``: peak DRAM bandwidth, decimal (TB/s × 1e12).
- ``dense_tflops``: peak dense tensor-core throughput (no 2:4 sparsity), in
  TFLOPS (TOPS for integer types), keyed by input type. A type missing from
  the dict has no tensor-core path on that GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from labs.catalog.formats import TensorType

BYTES_PER_GB = 10**9
BYTES_PER_MIB = 2**20
BYTES_PER_TB = 10**12

# Architectures: the lowest compute capability (major×10+minor) of each, and its
# tensor-core input types. Volta has FP16 only; Turing adds INT8/INT4; Ampere adds
# TF32/BF16; Ada adds FP8; Hopper keeps FP8 and drops INT4; Blackwell (sm_100) adds
# FP6/FP4 and the block-scaled MX and NVFP4 formats. Pascal (sm_61) has no tensor
# cores; it is here for the dp4a integer dot products the kernel paths cite.


@dataclass(frozen=True)
class Architecture:
    name: str
    sm: int  # compute capability major×10+minor of its first parts
    tensor_types: tuple[TensorType, ...]


PASCAL = Architecture("Pascal", 61, ())
VOLTA = Architecture("Volta", 70, ("fp16",))
TURING = Architecture("Turing", 75, ("fp16", "int8", "int4"))
AMPERE = Architecture("Ampere", 80, ("tf32", "bf16", "fp16", "int8", "int4"))
ADA = Architecture(
    "Ada Lovelace", 89, ("tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "int4")
)
HOPPER = Architecture("Hopper", 90, ("tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8"))
BLACKWELL = Architecture(
    "Blackwell",
    100,
    (
        "tf32",
        "bf16",
        "fp16",
        "fp8_e4m3",
        "fp8_e5m2",
        "mxfp8",
        "fp6",
        "mxfp6",
        "fp4",
        "mxfp4",
        "nvfp4",
        "int8",
    ),
)


@dataclass(frozen=True)
class GPU:
    id: str
    name: str
    arch: Architecture
    compute_capability: float
    memory_gb: float  # as marketed ("80 GB"), decimal reading
    memory_type: str
    nvidia_smi_mib: int  # memory.total as nvidia-smi reports it
    bandwidth_tb_s: float
    sm_count: int  # streaming multiprocessors
    dense_tflops: dict[str, float] = field(default_factory=dict)
    # Peak FP32 on the CUDA cores (no tensor cores), TFLOPS; None where the datasheet
    # does not list it.
    fp32_cuda_core_tflops: float | None = None
    # nvidia-smi's name contains one of these (the longest match wins: "L40S" before
    # "L4"); parts sold in two sizes under one name tell them apart by memory.total.
    smi_names: tuple[str, ...] = ()
    smi_min_mib: int = 0
    source_url: str = ""
    notes: str = ""

    @property
    def architecture(self) -> str:
        return self.arch.name

    @property
    def tensor_types(self) -> tuple[str, ...]:
        """Tensor-core input types (a ``labs.catalog.formats.TensorType`` each)."""
        return self.arch.tensor_types

    @property
    def memory_bytes(self) -> int:
        """Marketed capacity read as decimal GB, in bytes."""
        return round(self.memory_gb * BYTES_PER_GB)

    @property
    def visible_memory_bytes(self) -> int:
        """Total device memory as the driver reports it (nvidia-smi), in bytes."""
        return self.nvidia_smi_mib * BYTES_PER_MIB

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_tb_s * BYTES_PER_TB

    def supports(self, tensor_type: str) -> bool:
        """Whether the tensor cores take ``tensor_type`` inputs natively."""
        return tensor_type in self.tensor_types


GPUS: dict[str, GPU] = {
    g.id: g
    for g in (
        GPU(
            id="v100",
            name="NVIDIA V100 SXM2 32 GB",
            arch=VOLTA,
            compute_capability=7.0,
            memory_gb=32,
            memory_type="HBM2",
            nvidia_smi_mib=32768,
            bandwidth_tb_s=0.9,
            dense_tflops={"fp16": 125},
            sm_count=80,  # 5,120 / 64
            fp32_cuda_core_tflops=15.7,
            smi_names=("V100",),
            source_url="https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf",
        ),
        GPU(
            id="t4",
            name="NVIDIA T4",
            arch=TURING,
            compute_capability=7.5,
            memory_gb=16,
            memory_type="GDDR6",
            nvidia_smi_mib=15360,
            bandwidth_tb_s=0.32,
            dense_tflops={"fp16": 65, "int8": 130, "int4": 260},
            sm_count=40,  # 2,560 / 64
            fp32_cuda_core_tflops=8.1,
            smi_names=("T4",),
            source_url="https://www.nvidia.com/en-us/data-center/tesla-t4/",
            notes="No BF16: train and serve in FP16 on Turing.",
        ),
        GPU(
            id="a100-40gb",
            name="NVIDIA A100 SXM4 40 GB",
            arch=AMPERE,
            compute_capability=8.0,
            memory_gb=40,
            memory_type="HBM2",
            nvidia_smi_mib=40960,
            bandwidth_tb_s=1.555,
            dense_tflops={"tf32": 156, "bf16": 312, "fp16": 312, "int8": 624, "int4": 1248},
            sm_count=108,  # 6,912 / 64
            fp32_cuda_core_tflops=19.5,
            smi_names=("A100",),
            source_url="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        ),
        GPU(
            id="a100-80gb",
            name="NVIDIA A100 SXM4 80 GB",
            arch=AMPERE,
            compute_capability=8.0,
            memory_gb=80,
            memory_type="HBM2e",
            nvidia_smi_mib=81920,
            bandwidth_tb_s=2.039,
            dense_tflops={"tf32": 156, "bf16": 312, "fp16": 312, "int8": 624, "int4": 1248},
            sm_count=108,
            fp32_cuda_core_tflops=19.5,
            smi_names=("A100",),
            smi_min_mib=60_000,  # 40 GB parts report 40,960 MiB
            source_url="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        ),
        GPU(
            id="l4",
            name="NVIDIA L4",
            arch=ADA,
            compute_capability=8.9,
            memory_gb=24,
            memory_type="GDDR6",
            nvidia_smi_mib=23034,
            bandwidth_tb_s=0.3,
            dense_tflops={"tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5, "int8": 242.5},
            sm_count=58,  # 7,424 / 128
            fp32_cuda_core_tflops=30.3,
            smi_names=("L4",),
            source_url="https://www.nvidia.com/en-us/data-center/l4/",
        ),
        GPU(
            id="l40s",
            name="NVIDIA L40S",
            arch=ADA,
            compute_capability=8.9,
            memory_gb=48,
            memory_type="GDDR6",
            nvidia_smi_mib=46068,
            bandwidth_tb_s=0.864,
            dense_tflops={"tf32": 183, "bf16": 362.05, "fp16": 362.05, "fp8": 733, "int8": 733},
            sm_count=142,  # 18,176 / 128
            fp32_cuda_core_tflops=91.6,
            smi_names=("L40S",),
            source_url="https://www.nvidia.com/en-us/data-center/l40s/",
        ),
        GPU(
            id="rtx-4090",
            name="NVIDIA GeForce RTX 4090",
            arch=ADA,
            compute_capability=8.9,
            memory_gb=24,
            memory_type="GDDR6X",
            nvidia_smi_mib=24564,
            bandwidth_tb_s=1.008,
            # FP32-accumulate figures from the Ada whitepaper (appendix table).
            dense_tflops={"tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3, "int8": 660.6},
            sm_count=128,  # 16,384 / 128
            fp32_cuda_core_tflops=82.6,
            smi_names=("RTX 4090",),
            source_url="https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
        ),
        GPU(
            id="h100",
            name="NVIDIA H100 SXM 80 GB",
            arch=HOPPER,
            compute_capability=9.0,
            memory_gb=80,
            memory_type="HBM3",
            nvidia_smi_mib=81559,
            bandwidth_tb_s=3.35,
            dense_tflops={"tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979, "int8": 1979},
            sm_count=132,  # 16,896 / 128 (SXM5)
            fp32_cuda_core_tflops=67.0,
            smi_names=("H100",),
            source_url="https://www.nvidia.com/en-us/data-center/h100/",
        ),
        GPU(
            id="h200",
            name="NVIDIA H200 SXM 141 GB",
            arch=HOPPER,
            compute_capability=9.0,
            memory_gb=141,
            memory_type="HBM3e",
            nvidia_smi_mib=143771,
            bandwidth_tb_s=4.8,
            dense_tflops={"tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979, "int8": 1979},
            sm_count=132,
            fp32_cuda_core_tflops=67.0,
            smi_names=("H200",),
            source_url="https://www.nvidia.com/en-us/data-center/h200/",
        ),
        GPU(
            id="b200",
            name="NVIDIA B200 (HGX B200)",
            arch=BLACKWELL,
            compute_capability=10.0,
            memory_gb=180,
            memory_type="HBM3e",
            nvidia_smi_mib=183359,
            bandwidth_tb_s=7.7,
            dense_tflops={
                "tf32": 1100,
                "bf16": 2250,
                "fp16": 2250,
                "fp8": 4500,
                "fp6": 4500,
                "fp4": 9000,
                "int8": 4500,
            },
            sm_count=148,  # cudaGetDeviceProperties
            smi_names=("B200",),
            source_url="https://www.nvidia.com/en-us/data-center/hgx/",
            notes="HGX B200 per-GPU figures (180 GB, 7.7 TB/s); the chip was announced with 192 GB, 8 TB/s.",
        ),
    )
}

# The registry's ids, in its order: a pydantic field of this type accepts exactly them.
# (A type checker cannot read a Literal built from data; it sees str.)
if TYPE_CHECKING:
    GpuId = str
else:
    GpuId = Literal[tuple(GPUS)]


def get_gpu(gpu_id: str) -> GPU:
    """The registry entry for ``gpu_id``; ``KeyError`` naming the known ids otherwise."""
    try:
        return GPUS[gpu_id]
    except KeyError:
        raise KeyError(f"unknown gpu {gpu_id!r}; known: {', '.join(GPUS)}") from None


def match_smi_name(name: str, memory_mib: float | None) -> str | None:
    """The registry id of the GPU nvidia-smi calls ``name`` (with ``memory.total`` in MiB,
    which tells sizes apart), or ``None``: the longest matching name hint wins."""
    upper = name.upper()
    best: tuple[int, int, str] | None = None
    for gpu in GPUS.values():
        for hint in gpu.smi_names:
            if hint in upper and (memory_mib or 0) >= gpu.smi_min_mib:
                key = (len(hint), gpu.smi_min_mib, gpu.id)
                best = key if best is None or key[:2] > best[:2] else best
    return best[2] if best else None


def sm_of(compute_capability: float) -> int:
    """7.5 → 75, 10.0 → 100 (exact integer compare, no float thresholds)."""
    return round(compute_capability * 10)


# SMs: the datasheet's CUDA-core count divided by the FP32 lanes per SM of the
# architecture (64 on Volta, Turing and GA100; 128 on Ada and Hopper). B200: 148, as
# cudaGetDeviceProperties reports it (multiProcessorCount). Per-SM limits by compute
# capability live with the occupancy fact (labs.catalog.facts.claims.SM_LIMITS).
SM_COUNT: dict[str, int] = {g.id: g.sm_count for g in GPUS.values()}
# Peak FP32 on the CUDA cores, TFLOPS, of the GPUs whose datasheet lists it: what a kernel
# that multiplies with ordinary FMAs can reach.
FP32_CUDA_CORE_TFLOPS: dict[str, float] = {
    g.id: g.fp32_cuda_core_tflops for g in GPUS.values() if g.fp32_cuda_core_tflops is not None
}
