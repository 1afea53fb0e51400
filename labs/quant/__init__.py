"""labs.quant: lowbit's quantization library (vectorised torch, CPU and CUDA alike).

    from labs.quant import quantize, FORMATS
    q = quantize(x, "nvfp4")     # blocks run along the last dim
    q.dequantize()               # float32, same shape and device as x
    q.nbytes                     # every stored byte
    q.codes, q.scales            # per-element codes, decoded block scales
    q.to_bytes()                 # packed bytes (GGUF's block layout for the q* formats)
    FORMATS["nvfp4"].block_size, FORMATS["nvfp4"].bits_per_value

Importing this package imports no torch: every module imports it inside the functions
that compute, so the web process can read ``FORMATS`` and the torch-free table of formats,
``labs.quant.spec`` (``FormatKey``, ``SPECS``). The first quantization imports torch.
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
)
from labs.quant.core import Format, Layout, bits_per_value, get_format, quantize, registry
from labs.quant.spec import FORMAT_LIMITS, SPECS, FormatKey, FormatSpec
from labs.quant.tensor import Affine, QuantizedTensor

#: Every format by key, with its default options, in ``FormatKey`` order.
FORMATS: MappingProxyType[str, Format] = MappingProxyType(
    {key.value: registry()[key]() for key in FormatKey}
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
    "SPECS",
    "Affine",
    "Format",
    "FormatKey",
    "FormatSpec",
    "Layout",
    "QuantizedTensor",
    "bits_per_value",
    "get_format",
    "quantize",
]
