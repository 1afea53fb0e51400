"""Fact functions for accelerators beyond NVIDIA's registry: AMD Instinct (ROCm) and Apple
silicon (MLX), FP8's FNUZ flavour, and MLX's quantization formats (issue 23, "Breadth").

``labs.catalog.gpus`` is an NVIDIA registry (compute capability, nvidia-smi MiB, the labs'
GPU choices), so these rows live in their own table: adding them there would offer an
MI300X to labs that model CUDA kernels. Each row is the vendor's datasheet figure
(URL in ``source_url``); capacities are the marketed GB read as 10^9 bytes, as
``labs.catalog.gpus`` reads NVIDIA's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from labs.catalog import formats, memory, roofline
from labs.catalog.gpus import FP32_CUDA_CORE_TFLOPS, GPUS
from labs.catalog.models import get_model, tensor_groups

BYTES_PER_GB = 10**9
BYTES_PER_TB = 10**12
TFLOPS = 10**12
BITS_PER_BYTE = 8
HALF_BYTES = 2  # bf16/fp16 tensors MLX leaves unquantized (norms, biases)


@dataclass(frozen=True)
class Accelerator:
    """One non-NVIDIA device: capacity, bandwidth and (where published) peak dense FLOP/s."""

    id: str
    name: str
    memory_gb: float
    bandwidth_tb_s: float
    dense_tflops: dict[str, float] = field(default_factory=dict)
    compute_units: int = 0
    wavefront: int = 0
    peak_clock_mhz: int = 0
    source_url: str = ""


ACCELERATORS: dict[str, Accelerator] = {
    a.id: a
    for a in (
        # CDNA 3, gfx942: 304 CUs (38 per XCD × 8) at up to 2,100 MHz. Dense matrix peaks:
        # 2,048 bf16 and 4,096 fp8 FLOPs per CU per clock (sparsity doubles them).
        Accelerator(
            "mi300x",
            "AMD Instinct MI300X (OAM, 192 GB HBM3)",
            memory_gb=192,
            bandwidth_tb_s=5.3,
            dense_tflops={"tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
            compute_units=304,
            wavefront=64,
            peak_clock_mhz=2100,
            source_url="https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
        ),
        # Unified memory: the GPU reads the same LPDDR5X the CPU does. Top configurations.
        Accelerator(
            "m4-max",
            "Apple M4 Max (40-core GPU, 128 GB)",
            memory_gb=128,
            bandwidth_tb_s=0.546,
            source_url="https://www.apple.com/newsroom/2024/10/apple-introduces-m4-pro-and-m4-max/",
        ),
        Accelerator(
            "m3-ultra",
            "Apple M3 Ultra (80-core GPU, 512 GB)",
            memory_gb=512,
            bandwidth_tb_s=0.819,
            source_url="https://www.apple.com/newsroom/2025/03/apple-reveals-m3-ultra-taking-apple-silicon-to-a-new-extreme/",
        ),
    )
}

SPEC_WHAT = ("memory_bytes", "bandwidth", "peak_flops", "ridge", "compute_units", "wavefront")


def peak_flops(device: str, dtype: str = "bf16") -> float:
    """Peak dense FLOP/s of ``dtype`` on a registry GPU or an accelerator row; ``fp32`` on a
    registry GPU is its CUDA cores' rate (no tensor cores: A100 → 19.5e12)."""
    if device in GPUS and dtype == "fp32":
        table = FP32_CUDA_CORE_TFLOPS
        if device not in table:
            raise KeyError(f"{device} publishes no fp32 CUDA-core peak; known: {', '.join(table)}")
        return table[device] * TFLOPS
    table = GPUS[device].dense_tflops if device in GPUS else _accelerator(device).dense_tflops
    if dtype not in table:
        raise KeyError(f"{device} has no published dense {dtype} peak; known: {', '.join(table)}")
    return table[dtype] * TFLOPS


def bandwidth(device: str) -> float:
    """Peak memory bandwidth in bytes per second."""
    if device in GPUS:
        return GPUS[device].bandwidth_bytes_per_s
    return _accelerator(device).bandwidth_tb_s * BYTES_PER_TB


def accelerator_spec(device: str, what: str, dtype: str = "bf16") -> float:
    """One datasheet number of a device: ``memory_bytes`` (marketed GB × 1e9), ``bandwidth``
    (B/s), ``peak_flops`` of ``dtype``, ``ridge`` (FLOPs per byte where compute and memory
    time are equal), ``compute_units`` or ``wavefront`` (threads that run in lockstep)."""
    if what not in SPEC_WHAT:
        raise KeyError(f"unknown quantity {what!r}; known: {', '.join(SPEC_WHAT)}")
    if what == "bandwidth":
        return bandwidth(device)
    if what == "peak_flops":
        return peak_flops(device, dtype)
    if what == "ridge":
        return peak_flops(device, dtype) / bandwidth(device)
    if what == "memory_bytes":
        return GPUS[device].memory_bytes if device in GPUS else _accelerator(device).memory_gb * 1e9
    row = _accelerator(device)
    value = row.compute_units if what == "compute_units" else row.wavefront
    if not value:
        raise KeyError(f"{device} publishes no {what}")
    return value


def _accelerator(device: str) -> Accelerator:
    try:
        return ACCELERATORS[device]
    except KeyError:
        known = ", ".join([*GPUS, *ACCELERATORS])
        raise KeyError(f"unknown device {device!r}; known: {known}") from None


def decode_tokens_per_s_bound(
    model: str, weight_format: str, device: str, tensor_parallel: int = 1
) -> float:
    """Batch-1 decode ceiling of a registry model on any device: bandwidth ÷ the weight bytes
    one GPU reads per step (``labs.catalog.roofline.weight_bytes_read_per_step``: everything but the
    embedding table). KV reads, kernel efficiency and TP communication only lower it."""
    spec = get_model(model)
    problem = memory.valid_tensor_parallel(spec, tensor_parallel)
    if problem:
        raise ValueError(f"tensor_parallel {tensor_parallel} for {model}: {problem}")
    if weight_format not in formats.WEIGHT_FORMATS:
        raise KeyError(f"unknown weight_format {weight_format!r}")
    read = roofline.weight_bytes_read_per_step(spec, weight_format, tensor_parallel, 1)
    return bandwidth(device) / read


# --- FP8: OCP (e4m3fn) against FNUZ (MI300's gfx942) -----------------------------

FP8_TORCH = {
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "fp8_e4m3_fnuz": "float8_e4m3fnuz",
    "fp8_e5m2_fnuz": "float8_e5m2fnuz",
}
FP8_INFO = ("max", "smallest_normal")


def fp8_info(dtype: str, what: str) -> float:
    """``max`` or ``smallest_normal`` of an FP8 flavour, read from ``torch.finfo``:
    e4m3fn 448 and 2^-6; e4m3fnuz 240 and 2^-7 (bias 8 instead of 7, no infinities,
    a single NaN at 0x80 instead of negative zero)."""
    import torch

    if what not in FP8_INFO:
        raise KeyError(f"unknown quantity {what!r}; known: {', '.join(FP8_INFO)}")
    info = torch.finfo(getattr(torch, _fp8(dtype)))
    return float(info.max if what == "max" else info.smallest_normal)


def fp8_reinterpret(value: float, source: str = "fp8_e4m3", target: str = "fp8_e4m3_fnuz") -> float:
    """Round ``value`` to ``source``, then read the same byte as ``target``.

    What a loader gets when it hands an OCP e4m3fn checkpoint's bytes to an MI300 FNUZ
    kernel unchanged: every value halves (448 → 224), which is why vLLM's
    ``normalize_e4m3fn_to_e4m3fnuz`` doubles the scales (and zeroes 0x80, which is −0 in
    e4m3fn but NaN in FNUZ).
    """
    import torch

    code = torch.tensor([value], dtype=torch.float32).to(getattr(torch, _fp8(source)))
    return float(code.view(torch.uint8).view(getattr(torch, _fp8(target))).float()[0])


def _fp8(dtype: str) -> str:
    try:
        return FP8_TORCH[dtype]
    except KeyError:
        raise KeyError(f"unknown fp8 dtype {dtype!r}; known: {', '.join(FP8_TORCH)}") from None


# --- MLX quantization (mx.quantize) ------------------------------------------------


@dataclass(frozen=True)
class MlxMode:
    """One row of mx.quantize's table: allowed group sizes and bits (defaults first), the
    bits of the per-group scale (0: the input's dtype) and whether a bias is stored."""

    group_sizes: tuple[int, ...]
    bits: tuple[int, ...]
    scale_bits: int
    bias: bool


MLX_MODES: dict[str, MlxMode] = {
    "affine": MlxMode((64, 32, 128), (4, 2, 3, 5, 6, 8), 0, True),
    "mxfp4": MlxMode((32,), (4,), 8, False),  # E2M1 values, E8M0 scale
    "mxfp8": MlxMode((32,), (8,), 8, False),  # E4M3 values, E8M0 scale
    "nvfp4": MlxMode((16,), (4,), 8, False),  # E2M1 values, E4M3 scale
}


def mlx_bits_per_weight(
    mode: str = "affine", bits: int = 0, group_size: int = 0, input_bits: int = 16
) -> float:
    """Stored bits per weight of ``mx.quantize``: value bits + (scale [+ bias]) bits / group.

    Affine keeps a scale and a bias per group in the input's dtype (``input_bits``):
    4-bit, group 64, bf16 → 4 + 32/64 = 4.5. mxfp4 → 4.25, nvfp4 → 4.5 (its optional
    per-tensor global scale not counted), mxfp8 → 8.25.
    """
    row = _mlx_mode(mode)
    bits = bits or row.bits[0]
    group_size = group_size or row.group_sizes[0]
    if bits not in row.bits or group_size not in row.group_sizes:
        raise ValueError(f"{mode} takes bits {row.bits} and group sizes {row.group_sizes}")
    per_group = (row.scale_bits or input_bits) * (2 if row.bias else 1)
    return bits + per_group / group_size


def mlx_weight_bytes(model: str, mode: str = "affine", bits: int = 0, group_size: int = 0) -> int:
    """Bytes of a dense registry model converted by ``mlx_lm.convert -q``: every linear
    layer, the embedding and the lm_head quantized; norms and biases kept in bf16."""
    spec = get_model(model)
    if spec.is_moe:
        raise ValueError(f"{model} is MoE: which expert and router tensors MLX quantizes varies")
    per_weight = mlx_bits_per_weight(mode, bits, group_size)
    total = 0.0
    for g in tensor_groups(spec):
        quantized = g.linear or g.kind in ("embedding", "lm_head")
        total += g.params * (per_weight / BITS_PER_BYTE if quantized else HALF_BYTES)
    return round(total)


def mlx_decode_tokens_per_s_bound(
    model: str, device: str, mode: str = "affine", bits: int = 0, group_size: int = 0
) -> float:
    """Upper bound on batch-1 decode speed: bandwidth / weight bytes read per token.

    A step reads every quantized weight except the embedding table, of which it gathers
    one row; KV-cache reads, kernel efficiency and the OS's share of bandwidth only lower it.
    """
    spec = get_model(model)
    per_weight = mlx_bits_per_weight(mode, bits, group_size) / BITS_PER_BYTE
    embedding_table = spec.vocab_size * spec.hidden_size * per_weight
    one_row = spec.hidden_size * per_weight
    read = mlx_weight_bytes(model, mode, bits, group_size) - embedding_table + one_row
    return bandwidth(device) / read


def _mlx_mode(mode: str) -> MlxMode:
    try:
        return MLX_MODES[mode]
    except KeyError:
        raise KeyError(f"unknown MLX mode {mode!r}; known: {', '.join(MLX_MODES)}") from None


HARDWARE_FACTS: dict[str, Callable[..., float | int]] = {
    "accelerator_spec": accelerator_spec,
    "decode_tokens_per_s_bound": decode_tokens_per_s_bound,
    "fp8_info": fp8_info,
    "fp8_reinterpret": fp8_reinterpret,
    "mlx_bits_per_weight": mlx_bits_per_weight,
    "mlx_weight_bytes": mlx_weight_bytes,
    "mlx_decode_tokens_per_s_bound": mlx_decode_tokens_per_s_bound,
}
