"""Lab ``reproducibility``: "same input, different result after an update" — a drill.

A 2-layer MLP built from a fixed seed runs one fixed batch. The lab records
what a bug report needs (torch, Python, device, dtype, matmul settings, input
shape, seed), then compares the outputs that people expect to be equal:

- two runs of the same code (bitwise, with ``torch.use_deterministic_algorithms``);
- one test case computed alone and inside the batch (batch invariance);
- on the CPU, 1 thread against all threads (reduction order);
- fp32 weights against int8 (symmetric, per output channel) and fp8 E4M3
  (per-tensor scale) weights: max |Δlogit| and top-1 agreement over the batch.

Activations stay fp32 throughout (weight-only quantization), so every
difference in the last comparison comes from the weights' rounding.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.reproducibility.compute import Trial, compare, run
from labs.reproducibility.model import FINGERPRINT_HEX_CHARS, Params, Result

__all__ = ["FINGERPRINT_HEX_CHARS", "LAB", "Params", "Result", "Trial", "compare"]
from labs.reproducibility.present import present

LAB = Lab(
    id="reproducibility",
    title="Reproducibility: same input, different result?",
    summary="Run a seeded MLP twice, alone and in a batch, on one thread and many, and with int8 "
    "and fp8 weights: see which comparisons are bitwise equal, which differ and by how much, and "
    "what a bug report must record.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=60.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("int8_top1_agreement", "fraction"),
        ("int8_max_abs_diff", "logits"),
        ("fp8_top1_agreement", "fraction"),
    ),
    concept=concepts.reproducibility,
)
