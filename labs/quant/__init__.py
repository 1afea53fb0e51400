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
The format classes load on first use of ``FORMATS`` or ``quantize``; ``labs.quant.spec``
alone loads nothing else of the library.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from labs.quant.constants import (
    E8M0_EXPONENT_BIAS,
    F4_E2M1_MAX,
    F6_E2M3_MAX,
    F6_E3M2_MAX,
    F8_E4M3_MAX,
    F8_E5M2_MAX,
)
from labs.quant.spec import FORMAT_LIMITS, SPECS, FormatKey, FormatSpec

if TYPE_CHECKING:
    from labs.quant.api import FORMATS, bits_per_value, get_format, quantize
    from labs.quant.core import Format
    from labs.quant.layout import Layout
    from labs.quant.tensor import Affine, QuantizedTensor

# Loaded on first use, so that ``import labs.quant.spec`` (which imports this package
# first) loads the table of formats alone: not the format classes, the block operations
# or the native extension.
_LAZY = {
    "Format": "labs.quant.core",
    "Layout": "labs.quant.layout",
    "FORMATS": "labs.quant.api",
    "bits_per_value": "labs.quant.api",
    "get_format": "labs.quant.api",
    "quantize": "labs.quant.api",
    "Affine": "labs.quant.tensor",
    "QuantizedTensor": "labs.quant.tensor",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import_module("labs.quant.formats")
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'labs.quant' has no attribute {name!r}")


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
