"""Lab ``kv-capacity``: how many requests fit in a paged KV cache, and do they queue?

The pool is what vLLM gives the cache: capacity × ``gpu_memory_utilization``
minus weights and the runtime allowance, cut into blocks of ``block_size``
tokens (every layer's K and V for those tokens, on one GPU of the
tensor-parallel group). A request holds ceil(tokens / block) blocks; with
prefix caching the full blocks of a shared system prompt are stored once
(only *full* blocks are shared: they are hashed by content). Requests are
counted at their full length (prompt + output), the worst case a scheduler
must be ready for.

Waiting: by Little's law the mean number of requests in service is
arrival rate × time in service. Time in service is ``request_seconds`` or,
when 0, ``output_tokens`` decode steps from the memory-bound roofline of
``labs.catalog.roofline.decode_step`` at that occupancy. If the occupancy the load
needs exceeds the requests the cache can hold, requests wait for blocks.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events and the headline tiles.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.kv_capacity.compute import run
from labs.kv_capacity.model import Params, Result
from labs.kv_capacity.present import headline, present

__all__ = ["LAB", "Params", "Result"]

LAB = Lab(
    id="kv-capacity",
    title="KV cache capacity: blocks, concurrent requests and waiting",
    summary="Cut the memory left after weights into paged KV blocks, count how many requests of a "
    "given length fit with and without a shared prefix, and see whether a load would queue; then "
    "repeat with an fp8 KV cache.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("kv_bytes_per_token", "bytes"),
        ("total_blocks", "blocks"),
        ("max_concurrent_requests", "requests"),
        ("fp8_max_concurrent_requests", "requests"),
    ),
    headline=headline,
    concept=concepts.kv_capacity,
)
