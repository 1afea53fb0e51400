"""Lab ``block-quantize``: quantize a tensor to one format and look inside.

The tensor is drawn from a distribution (normal, uniform, Laplace, normal with
injected outliers) or is the learner's own values — for instance the 16 values
of one NVFP4 block. The lab shows the codes and scales of the first blocks, the
stored bytes and bits per value, the error split into rounding error (values
inside the block's representable range) and clipping error (values beyond it),
and histograms of the values and of the errors.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events and the headline tiles.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.block_quantize.compute import quantize_blocks, run
from labs.block_quantize.model import (
    FORMAT_KEYS,
    MAX_CUSTOM_VALUES,
    MAX_DIM,
    BlockQuantizeParams,
    BlockQuantizeResult,
    BlockView,
    Histogram,
)
from labs.block_quantize.present import headline, present

__all__ = [
    "FORMAT_KEYS",
    "LAB",
    "MAX_CUSTOM_VALUES",
    "MAX_DIM",
    "BlockQuantizeParams",
    "BlockQuantizeResult",
    "BlockView",
    "Histogram",
    "quantize_blocks",
]

LAB = Lab(
    id="block-quantize",
    title="Block-quantize a tensor",
    summary="Quantize a tensor (normal, uniform, heavy-tailed, with outliers, or your own values) to int8/int4, FP8, MX, NVFP4, NF4 or GGUF formats; see the codes and scales of the first blocks, bits per value, and the error split into rounding and clipping.",
    needs_gpu=NeedsGPU.preferred,
    params=BlockQuantizeParams,
    run=run,
    present=present,
    time_limit_s=120.0,
    memory_limit_mb=2048,
    numeric_outputs=(("bits_per_value", "bits"), ("nbytes", "bytes")),
    headline=headline,
    concept=concepts.block_quantize,
)
