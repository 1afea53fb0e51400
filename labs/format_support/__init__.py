"""Lab ``format-support``: which kernel path a checkpoint format takes on a GPU.

The same file can run three different ways on two GPUs: the tensor cores read
its type directly (*native*), a kernel keeps it compact in memory and widens it
to 16 bits in registers before a 16-bit matmul (*emulated*, weight-only
dequantization), or it must be converted to a wider type when loaded
(*upcast*, the memory saving is lost) — or no common engine runs it at all
(*unsupported*: only an offline conversion to a type the GPU has).

The decision is a table of compute-capability thresholds (``RULES``, in
``labs.catalog.kernel_paths``), each row citing its source. It needs only the capability,
so it also covers a GPU that is not in ``labs.catalog.gpus`` (``gpu="auto"`` reads the
worker's own card with ``nvidia-smi``). Units: bits per parameter, bytes, GB = 1e9 bytes.

``model`` holds the parameters and the result, ``compute`` assesses (no torch),
``present`` turns the assessment into the page's events.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.catalog.gpus import sm_of
from labs.catalog.kernel_paths import RULES, Path
from labs.format_support.compute import (
    AUTO_FALLBACK_GPU,
    REFERENCE_MATRIX,
    Assessment,
    assess,
    decide,
    file_bits_per_param,
    parse_smi,
    run,
)
from labs.format_support.model import Params, Result
from labs.format_support.present import present

__all__ = [
    "AUTO_FALLBACK_GPU",
    "LAB",
    "REFERENCE_MATRIX",
    "RULES",
    "Assessment",
    "Params",
    "Path",
    "Result",
    "assess",
    "decide",
    "file_bits_per_param",
    "parse_smi",
    "sm_of",
]

LAB = Lab(
    id="format-support",
    title="Format support: native, emulated or upcast on your GPU",
    summary="For a checkpoint format and a GPU, whether the tensor cores run it natively, a kernel "
    "widens it on the fly, or it must be converted when loaded — and what that does to memory "
    "and decode speed, with every GPU side by side and each threshold cited.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=30.0,
    memory_limit_mb=512,
    numeric_outputs=(
        ("resident_bits_per_param", "bits"),
        ("decode_bytes_ratio", "× bf16"),
        ("weights_resident_gb", "GB"),
    ),
    concept=concepts.format_support,
)
