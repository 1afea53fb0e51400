"""The public entry points: ``FORMATS`` (every format with default options, by key),
``get_format``, ``quantize`` and ``bits_per_value``. ``labs.quant`` re-exports them.

This module sits above the format classes: it imports ``labs.quant.formats`` (which
registers every format with ``labs.quant.core``) and builds the instances once, so
nothing below it looks up a format by key and no module imports its own package.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import labs.quant.constants as C
from labs.quant.core import Format
from labs.quant.formats import registry
from labs.quant.spec import FormatKey

if TYPE_CHECKING:
    import torch

    from labs.quant.tensor import QuantizedTensor

# Every format by key, in ``FormatKey`` order, with its default options.
FORMATS: MappingProxyType[str, Format] = MappingProxyType(
    {key.value: registry()[key]() for key in FormatKey}
)


def get_format(fmt: str | Format, **options: Any) -> Format:
    """The format for ``fmt`` (a key or a Format) with ``options`` applied."""
    if isinstance(fmt, Format):
        return fmt.configure(**options)
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid formats are {sorted(FORMATS)}")
    return FORMATS[fmt].configure(**options)


def quantize(x: torch.Tensor, fmt: str | Format, **options: Any) -> QuantizedTensor:
    """Quantize ``x`` to format ``fmt`` (a key of FORMATS) with the format's options.

    Options by format: ``granularity`` ("tensor" | "channel" | block size, for int8,
    int4, fp8_e4m3, fp8_e5m2), ``zero_point`` and ``scale_dtype`` ("fp32" | "fp16",
    int8, int4), ``scale_rounding``
    ("floor" | "rceil", MX formats), ``double_quant`` (nf4), and ``nonfinite``
    ("raise" | "propagate", every format). Unknown keys or options raise ValueError.
    """
    return get_format(fmt, **options).quantize(x)


def bits_per_value(fmt: str, shape: tuple[int, ...] | None = None, **options: Any) -> float:
    """Stored bits per element of ``fmt``, scales and zero points included.

    Without ``shape``: element bits plus per-block scale, zero-point and (NF4 double
    quantization) second-level bits, e.g. q4_0 4.5, mxfp4 4.25, nvfp4 4.5; values stored
    once per tensor or per row are left out since they depend on the shape. With
    ``shape``: exact, ``8 * storage bytes / elements`` for a tensor of that shape.

    Scale types: int8/int4 and fp8_e4m3/fp8_e5m2 store float32 scales (4 bytes per
    tensor, row or block) and, with ``zero_point=True``, one zero point of the element
    width (8 or 4 bits) per scale. So ``bits_per_value("int4", granularity=128)`` is
    4 + 32/128 = 4.25, and 4 + 36/128 = 4.28125 with a zero point. int8/int4 with
    ``scale_dtype="fp16"`` store 2-byte scales, as GPTQ and AWQ checkpoints do:
    ``bits_per_value("int4", granularity=128, scale_dtype="fp16")`` is 4 + 16/128 = 4.125.
    """
    f = get_format(fmt, **options)
    if shape is None:
        return f.bits_per_value
    layout = f.layout_for(tuple(shape))
    return C.BITS_PER_BYTE * f.storage_bytes(layout) / layout.numel
