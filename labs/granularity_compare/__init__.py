"""Lab ``granularity-compare``: one tensor, six scale granularities, one format.

The same tensor (normal, uniform, Laplace, or normal with injected outliers) is
quantized to one of the formats whose scale granularity is an option in
labs.quant (int8, int4, fp8_e4m3, fp8_e5m2): one scale per tensor, one per row
(channel), and one per block of 16, 32, 64 and 128 elements along the row. For
each the lab reports the error (MSE, SQNR, max |error|, split into rounding and
clipping error), the bytes the scales cost and the bits per value they imply,
and which granularity buys the most SQNR per stored bit. An outlier forces a
large scale on every value that shares it; smaller scale groups confine the
damage, at the price of more scales.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events and the headline tiles.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.granularity_compare.compute import compare, make_tensor, outlier_count, run
from labs.granularity_compare.model import GRANULARITIES, GranularFormatKey, Params, Result
from labs.granularity_compare.present import headline, present

__all__ = [
    "LAB",
    "GRANULARITIES",
    "GranularFormatKey",
    "Params",
    "Result",
    "compare",
    "make_tensor",
    "outlier_count",
]

LAB = Lab(
    id="granularity-compare",
    title="Scale granularity: per tensor, per channel, per block",
    summary="Quantize one tensor (optionally with outliers) to int8, int4 or FP8 with one scale "
    "per tensor, per channel and per block of 16/32/64/128: error split into rounding and "
    "clipping, scale overhead in bytes and bits per value, and the SQNR each extra bit buys.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=120.0,
    memory_limit_mb=2048,
    numeric_outputs=(
        ("sqnr_db_tensor", "dB"),
        ("sqnr_db_block_32", "dB"),
        ("sqnr_gain_db_block_32", "dB"),
        ("scale_overhead_bytes_block_32", "bytes"),
        ("bits_per_value_block_32", "bits"),
    ),
    headline=headline,
    concept=concepts.granularity_compare,
)
