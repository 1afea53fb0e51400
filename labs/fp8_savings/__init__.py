"""Lab ``fp8-savings``: what FP8 weights (and an FP8 KV cache) buy at decode time.

Two configurations of the same model on the same GPUs: bf16 weights and KV
cache, and fp8 weights (E4M3, per-channel scales; embeddings and lm_head
stay bf16) with the KV cache in fp8 when ``fp8_kv_cache`` is set.

Roofline assumption, stated: a decode step is bounded by
max(bytes moved / (peak bandwidth × ``bandwidth_efficiency``),
FLOPs / peak tensor throughput) plus a fixed per-step cost that no weight
format changes (launches, sampling, scheduling, all-reduce latency). Bytes
moved per GPU = weights read once (MoE: only routed experts; of the token
embedding table only the one row each sequence looks up, while the lm_head is
read in full) + every cached K/V of every sequence. Activations and logits are
small in decode and are left out. FP8 matmuls run at FP8 tensor-core speed
where the GPU has it, otherwise at bf16/fp16 speed after dequantization
(weight-only FP8).

The lab compares both at the same batch, then at the largest batch each
configuration's free memory admits, and finds the largest batch that meets
the per-token latency target. A configuration whose weights, KV cache and
overhead do not fit at the requested batch gets no step time or throughput
at that batch (None, "does not fit"): it could not run.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events and the headline tiles.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.fp8_savings.compute import run
from labs.fp8_savings.model import Params, Result
from labs.fp8_savings.present import present

__all__ = ["LAB", "Params", "Result"]

LAB = Lab(
    id="fp8-savings",
    title="FP8 savings: bytes, step time and batch",
    summary="Compare bf16 and FP8 weights (optionally an FP8 KV cache) for a model on a GPU: bytes "
    "saved, memory-bound decode step time at the same batch, then the larger batch the freed "
    "memory admits, against a latency target.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("weights_saved_gb_per_gpu", "GB"),
        ("speedup_same_batch", "×"),
        ("max_batch_bf16", "sequences"),
        ("max_batch_fp8", "sequences"),
    ),
    concept=concepts.fp8_savings,
)
