"""Lab ``dot-product-scales``: where the scales go in a quantized matmul.

``C = A @ W.T`` with activations A (m × k) and weights W (n × k), both quantized
along K. A scale that is constant along K (per tensor, per row) factors out of
the dot product, so a kernel sums the element products first and multiplies by
``s_a[i] · s_w[j]`` once, in its epilogue — exact. A block scale changes inside
the sum: it must be applied to each K block's partial sum inside the reduction
(what MX / NVFP4 tensor cores and GGUF's dot kernels do). Applied after the full
dot product instead, one scale per row stands in for many and the result is
wrong by far more than the quantization error.

The lab computes, against the float32 product of the unquantized operands:
(a) per-channel (or per-tensor) scales after the dot product, (b) the chosen
block scales inside the reduction (``labs.quant.matmul``), (c) the same block
scales wrongly applied after the full dot product; then what an integer
accumulator must hold (K · 127² for int8) and, for asymmetric (zero-point)
quantization, the cross terms the zero points add to every dot product.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.dot_product_scales.compute import Product, multiply, run
from labs.dot_product_scales.model import FIXED_BLOCK, FormatChoice, Params, Result
from labs.dot_product_scales.present import present

__all__ = ["FIXED_BLOCK", "LAB", "FormatChoice", "Params", "Product", "Result", "multiply"]

LAB = Lab(
    id="dot-product-scales",
    title="Scales in a quantized dot product",
    summary="Quantize both operands of a matmul and apply the scales after the dot product "
    "(per channel), per K block inside the reduction, or — wrongly — block scales after the "
    "full dot product; compare each with fp32, see what an int32 accumulator must hold, and "
    "the cross terms zero points add.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=60.0,
    memory_limit_mb=2048,
    numeric_outputs=(
        ("rel_error_b", "fraction"),
        ("rel_error_c", "fraction"),
        ("int16_overflow_k", "elements of K"),
        ("int32_max_k", "elements of K"),
    ),
    concept=concepts.dot_product_scales,
)
