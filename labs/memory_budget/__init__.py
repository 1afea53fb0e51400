"""Lab ``memory-budget``: will this model fit on these GPUs, and with how much room?

Weights by tensor kind (from the real config), the KV cache for a batch at a
context length, and a runtime allowance, per GPU under tensor parallelism,
against the card's capacity. Accounting rules: ``labs.catalog.memory``.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events and the headline tiles.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.memory_budget.compute import run
from labs.memory_budget.model import Params, Result
from labs.memory_budget.present import headline, present

__all__ = ["LAB", "Params", "Result"]

LAB = Lab(
    id="memory-budget",
    title="Memory budget: weights, KV cache and overhead per GPU",
    summary="Count a real model's bytes by tensor kind, add the KV cache for your batch and context "
    "and a runtime allowance, split them across tensor-parallel GPUs, and see whether it fits.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("weights_gb", "GB"),
        ("kv_bytes_per_token", "bytes"),
        ("total_gb_per_gpu", "GB"),
        ("headroom_gb_per_gpu", "GB"),
        ("min_tensor_parallel", "GPUs"),
    ),
    headline=headline,
    concept=concepts.memory_budget,
)
