"""labs.quant: lowbit's quantization library (vectorised torch, CPU and CUDA alike).

    from labs.quant import quantize, FORMATS
    q = quantize(x, "nvfp4")     # blocks run along the last dim
    q.dequantize()               # float32, same shape and device as x
    q.nbytes                     # every stored byte
    q.codes, q.scales            # per-element codes, decoded block scales
    q.to_bytes()                 # packed bytes (GGUF's block layout for the q* formats)
    FORMATS["nvfp4"].block_size, FORMATS["nvfp4"].bits_per_value

Importing this package imports torch. Nothing else in ``labs`` imports it at module top
level, so the web process stays torch-free.
"""

from __future__ import annotations

from types import MappingProxyType

from labs.quant import formats as _formats  # noqa: F401  (registers every format)
from labs.quant.constants import (
    E8M0_EXPONENT_BIAS,
    F4_E2M1_MAX,
    F6_E2M3_MAX,
    F6_E3M2_MAX,
    F8_E4M3_MAX,
    F8_E5M2_MAX,
    FORMAT_LIMITS,
)
from labs.quant.core import (
    Affine,
    Format,
    Layout,
    QuantizedTensor,
    bits_per_value,
    get_format,
    quantize,
    registry,
)

# Display order: integers, float8, MX, NVFP4, NF4, GGUF (any later format goes last).
_ORDER = (
    "int8",
    "int4",
    "fp8_e4m3",
    "fp8_e5m2",
    "mxfp8_e4m3",
    "mxfp8_e5m2",
    "mxfp6_e2m3",
    "mxfp6_e3m2",
    "mxfp4",
    "nvfp4",
    "nf4",
    "q8_0",
    "q4_0",
    "q4_1",
    "q4_k",
    "q6_k",
)

#: Every format by key, with its default options.
FORMATS: MappingProxyType[str, Format] = MappingProxyType(
    {key: registry()[key]() for key in sorted(registry(), key=lambda k: (_ORDER + (k,)).index(k))}
)

__all__ = [
    "E8M0_EXPONENT_BIAS",
    "F4_E2M1_MAX",
    "F6_E2M3_MAX",
    "F6_E3M2_MAX",
    "F8_E4M3_MAX",
    "F8_E5M2_MAX",
    "FORMATS",
    "FORMAT_LIMITS",
    "Affine",
    "Format",
    "Layout",
    "QuantizedTensor",
    "bits_per_value",
    "get_format",
    "quantize",
]
