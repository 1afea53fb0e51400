"""Lab ``qlora-budget``: does QLoRA fine-tuning of this model fit on one card?

What is counted, per component (bytes, GB = 1e9 B):
- Base weights, frozen: every projection matrix in NF4 (4-bit codes + one
  absmax per 64 values: fp32, or with double quantization uint8 plus one fp32
  per 256 absmax values and an fp32 offset per tensor — bitsandbytes
  ``quantize_4bit(compress_statistics=True)``). Embeddings, lm_head, norms
  and biases are not quantized; PEFT's ``prepare_model_for_kbit_training``
  casts them to fp32 (``upcast_non_quantized``), otherwise 16-bit.
- LoRA adapters on the chosen projections, shapes from the real config:
  A [r, in] and B [out, r] per module (per expert for MoE). Weights and
  gradients in ``adapter_dtype`` (PEFT keeps adapters in fp32 by default);
  AdamW states: two per parameter in the parameter's dtype (torch), or
  bitsandbytes 8-bit states (1 byte + an fp32 absmax per 256 values each;
  tensors under 4096 values keep 32-bit states). Paged optimizers can spill
  their states to host memory under pressure.
- Activations saved for backward in 16-bit, assuming a fused attention
  kernel (SDPA/FlashAttention: no seq × seq matrix is kept). Without
  gradient checkpointing every layer keeps its activations; with it (one
  checkpoint per decoder layer, as Hugging Face does) each layer keeps its
  input and one layer is recomputed at a time.
- Logits: the lm_head output, an fp32 copy for the loss and its fp32 gradient
  (vocab × tokens each) — large for 128k+ vocabularies.
- Dequantization workspace: the largest projection dequantized to 16-bit.
- Runtime overhead: CUDA context, cuBLAS workspaces, allocator fragmentation.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events and the headline tiles.
"""

from __future__ import annotations

from labs import concepts
from labs.base import Lab, NeedsGPU
from labs.qlora_budget.compute import run
from labs.qlora_budget.model import Params, Result
from labs.qlora_budget.present import headline, present

__all__ = ["LAB", "Params", "Result"]

LAB = Lab(
    id="qlora-budget",
    title="QLoRA budget: fine-tune a 4-bit model on one GPU",
    summary="Add up NF4 base weights, LoRA adapters from the real projection shapes, gradients, "
    "optimizer states, activations and logits, and see whether QLoRA fits on one card.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("trainable_params", "params"),
        ("base_weights_gb", "GB"),
        ("total_gb", "GB"),
        ("headroom_gb", "GB"),
        ("max_micro_batch", "sequences"),
    ),
    headline=headline,
    concept=concepts.qlora_budget,
)
