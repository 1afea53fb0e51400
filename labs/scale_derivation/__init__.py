"""Lab ``scale-derivation``: the scale of a quantized tensor, step by step.

The learner types a few numbers. The lab derives the scale the way the format
does — ``amax``, the largest element value ``qmax``, ``scale = amax / qmax``
(NVFP4: a float32 tensor scale and E4M3 block scales; MXFP4: a power-of-two
scale per block of 32) — then each value's ``x / scale``, its rounded element,
the dequantized value, its error, and whether it was clipped; then the three edge
cases that break real quantizers (the all-zero tensor, FP8 overflow, the rounding
vs clipping split).

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events and the headline tiles.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.scale_derivation.compute import Derivation, cast_demo, derive, run
from labs.scale_derivation.model import PER_TENSOR_FORMATS, FormatChoice, Params, Result
from labs.scale_derivation.present import headline, present

__all__ = [
    "LAB",
    "PER_TENSOR_FORMATS",
    "Derivation",
    "FormatChoice",
    "Params",
    "Result",
    "cast_demo",
    "derive",
]

LAB = Lab(
    id="scale-derivation",
    title="Derive a scale step by step",
    summary="Type a few numbers and watch the scale being derived (amax, qmax, scale = amax / qmax; "
    "NVFP4 and MXFP4 block scales), each value rounded and clipped, the all-zero tensor that "
    "makes a naive quantizer divide 0 by 0, and why FP8 clamps before it casts.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("amax", "value units"),
        ("scale", "value units per step"),
        ("clipped", "values"),
        ("max_abs_error", "value units"),
    ),
    headline=headline,
    concept=concepts.scale_derivation,
)
