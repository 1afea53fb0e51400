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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from labs.base import Context, Lab, LabResult, NeedsGPU
from labs.catalog import memory
from labs.catalog.formats import BITS_PER_BYTE, NF4_BLOCK
from labs.catalog.gpus import GPU, get_gpu
from labs.catalog.memory import CapacityBasis, gb, gib
from labs.catalog.models import ModelConfig, get_model, linear_shapes, tensor_groups
from labs.catalog.params import ContextTokens, ModelOnGpuParams, RegistryGpu, RegistryModel
from labs.presenters import concepts, headlines

NF4_BITS = 4
DQ_ABSMAX_BYTES = 1  # double quantization: absmax stored as 8-bit codes
DQ_BLOCK = 256  # absmax values per second-level fp32 scale
DQ_OFFSET_BYTES = 4  # fp32 mean subtracted before the second quantization
BNB_STATE_BLOCK = 256  # bitsandbytes 8-bit optimizer: values per fp32 absmax
BNB_MIN_8BIT_SIZE = 4096  # smaller tensors keep 32-bit optimizer states
ADAM_STATES = 2  # exp_avg and exp_avg_sq
FP32_BYTES = 4
HALF_BYTES = 2  # bf16/fp16 activations and unquantized weights
FLASH_LSE_BYTES = 4  # fp32 log-sum-exp per head and token kept by fused attention
DROPOUT_MASK_BYTES = 1  # bool mask per element
MAX_RANK = 1024
MAX_MICRO_BATCH = 256

TargetModule = Literal["q", "k", "v", "o", "gate", "up", "down"]
ALL_TARGETS: tuple[TargetModule, ...] = ("q", "k", "v", "o", "gate", "up", "down")
_KIND = {
    "q": "attn_q",
    "k": "attn_k",
    "v": "attn_v",
    "o": "attn_o",
    "gate": "mlp_gate",
    "up": "mlp_up",
    "down": "mlp_down",
}
Optimizer = Literal["adamw", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit"]


class Params(ModelOnGpuParams):
    model: RegistryModel = Field(
        default="llama-3.1-8b", description="Base model from the registry."
    )
    gpu: RegistryGpu = Field(default="t4", description="The one GPU to train on.")
    rank: int = Field(
        default=16, ge=1, le=MAX_RANK, description="LoRA rank r (A is r × in, B is out × r)."
    )
    alpha: float = Field(
        default=32,
        gt=0,
        le=4096,
        description="LoRA alpha; the update is scaled by alpha / r (no memory effect).",
    )
    target_modules: list[TargetModule] = Field(
        default_factory=lambda: list(ALL_TARGETS),
        min_length=1,
        description="Projections that get adapters: q, k, v, o, gate, up, down (MoE: every expert's).",
    )
    lora_dropout: float = Field(
        default=0.05,
        ge=0,
        lt=1,
        description="Dropout on the adapter input; above 0 it stores a copy and a mask.",
    )
    adapter_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32",
        description="dtype of adapter weights and their gradients (PEFT default: fp32).",
    )
    optimizer: Optimizer = Field(
        default="paged_adamw_8bit",
        description="AdamW variant: torch (states in the parameter dtype) or bitsandbytes.",
    )
    double_quant: bool = Field(
        default=True, description="Quantize the NF4 absmax values to 8 bits (QLoRA)."
    )
    upcast_non_quantized: bool = Field(
        default=True,
        description="PEFT prepare_model_for_kbit_training: cast non-4-bit weights to fp32.",
    )
    seq_len: ContextTokens = Field(default=2048, description="Tokens per training sequence.")
    micro_batch: int = Field(
        default=1, ge=1, le=MAX_MICRO_BATCH, description="Sequences per forward/backward pass."
    )
    gradient_checkpointing: bool = Field(
        default=True, description="Recompute each decoder layer in backward."
    )
    overhead_gb: float = Field(
        default=memory.DEFAULT_RUNTIME_OVERHEAD_GB,
        ge=0,
        le=64,
        description="GB (1e9 B) for the CUDA context, workspaces and allocator fragmentation.",
    )
    capacity_basis: CapacityBasis = Field(
        default="datasheet", description="Budget against the datasheet GB or the nvidia-smi total."
    )

    @field_validator("target_modules")
    @classmethod
    def _unique_targets(cls, v: list[TargetModule]) -> list[TargetModule]:
        if len(set(v)) != len(v):
            raise ValueError("target_modules lists a module twice")
        return v


class Component(BaseModel):
    name: str
    bytes: int
    detail: str


class Result(LabResult):
    model: str
    gpu: str
    trainable_params: int
    trainable_percent: float
    lora_scaling: float
    base_quantized_params: int
    base_bits_per_quantized_param: float
    base_weights_bytes: int
    base_weights_gb: float
    components: list[Component]
    activations_bytes: int
    total_bytes: int
    total_gb: float
    total_gib: float
    gpu_capacity_bytes: int
    gpu_capacity_gb: float
    headroom_bytes: int
    headroom_gb: float
    fits: bool
    verdict: str
    max_micro_batch: int
    notes: list[str]


def _nf4_bytes(n_values: int, double_quant: bool) -> int:
    blocks = math.ceil(n_values / NF4_BLOCK)
    codes = math.ceil(n_values * NF4_BITS / BITS_PER_BYTE)
    if not double_quant:
        return codes + blocks * FP32_BYTES
    return (
        codes
        + blocks * DQ_ABSMAX_BYTES
        + math.ceil(blocks / DQ_BLOCK) * FP32_BYTES
        + DQ_OFFSET_BYTES
    )


def _optimizer_bytes(n_values: int, optimizer: str, param_bytes: int) -> int:
    if optimizer in ("adamw_8bit", "paged_adamw_8bit") and n_values >= BNB_MIN_8BIT_SIZE:
        blocks = math.ceil(n_values / BNB_STATE_BLOCK)
        return ADAM_STATES * (n_values + blocks * FP32_BYTES)
    if optimizer == "adamw":
        return ADAM_STATES * n_values * param_bytes
    return ADAM_STATES * n_values * FP32_BYTES  # bitsandbytes 32-bit states


def _per_token_layer_activations(model: ModelConfig, p: Params) -> int:
    """Bytes one token stores for backward in one decoder layer (16-bit, fused attention)."""
    h, i = model.hidden_size, model.intermediate_size
    k = model.num_experts_per_token
    # attention: norm in/out, q/k/v after RoPE, attention output (input of o)
    attn = 2 * h + model.q_dim + 2 * model.kv_dim + model.q_dim
    # MLP: norm in/out; per routed expert: gathered input (MoE only), gate, up, silu(gate), gate*up
    mlp = 2 * h + k * (4 * i + (h if model.is_moe else 0))
    total = HALF_BYTES * (attn + mlp) + FLASH_LSE_BYTES * model.num_attention_heads
    for target in p.target_modules:
        group = next(g for g in tensor_groups(model) if g.kind == _KIND[target])
        copies = k if model.is_moe and target in ("gate", "up", "down") else 1
        per_module = HALF_BYTES * p.rank
        if p.lora_dropout > 0:
            per_module += group.cols * (HALF_BYTES + DROPOUT_MASK_BYTES)
        total += copies * per_module
    return total


def _logit_bytes_per_token(model: ModelConfig, p: Params) -> int:
    lm_bytes = FP32_BYTES if p.upcast_non_quantized else HALF_BYTES
    loss_copy = 0 if lm_bytes == FP32_BYTES else FP32_BYTES
    return model.vocab_size * (lm_bytes + loss_copy + FP32_BYTES)


def _activation_bytes(model: ModelConfig, p: Params, micro_batch: int) -> tuple[int, int, int]:
    """(saved layer activations, logits, total) for ``micro_batch`` sequences of ``seq_len``."""
    tokens = p.seq_len * micro_batch
    per_layer = _per_token_layer_activations(model, p) * tokens
    if p.gradient_checkpointing:
        layers = model.num_layers * HALF_BYTES * model.hidden_size * tokens + per_layer
    else:
        layers = model.num_layers * per_layer
    logits = _logit_bytes_per_token(model, p) * tokens
    return layers, logits, layers + logits


def run(params: Params, ctx: Context) -> Result:
    result = budget(params)
    present(result, params, ctx)
    return result


@dataclass(frozen=True)
class _Weights:
    """The frozen base and the trainable adapters, bytes (parameters where named)."""

    quantized_params: int
    other_params: int
    base_nf4: int
    base_other: int
    lora_params: int
    adapter_bytes: int  # LoRA weights; their gradients take as many
    optimizer_bytes: int


def _weights(p: Params, model: ModelConfig) -> _Weights:
    linears = linear_shapes(model)
    hp_bytes = FP32_BYTES if p.upcast_non_quantized else HALF_BYTES
    other_params = sum(g.params for g in tensor_groups(model) if not g.linear)
    targeted = [g for g in linears if g.kind in {_KIND[t] for t in p.target_modules}]
    adapter_bytes_per_param = FP32_BYTES if p.adapter_dtype == "fp32" else HALF_BYTES
    lora_params = 0
    optimizer_bytes = 0
    for g in targeted:
        a_values, b_values = p.rank * g.cols, g.rows * p.rank
        lora_params += (a_values + b_values) * g.count
        optimizer_bytes += g.count * (
            _optimizer_bytes(a_values, p.optimizer, adapter_bytes_per_param)
            + _optimizer_bytes(b_values, p.optimizer, adapter_bytes_per_param)
        )
    return _Weights(
        quantized_params=sum(g.params for g in linears),
        other_params=other_params,
        base_nf4=sum(_nf4_bytes(g.rows * g.cols, p.double_quant) * g.count for g in linears),
        base_other=other_params * hp_bytes,
        lora_params=lora_params,
        adapter_bytes=lora_params * adapter_bytes_per_param,
        optimizer_bytes=optimizer_bytes,
    )


def _components(
    p: Params, model: ModelConfig, w: _Weights, layer_acts: int, logits: int
) -> list[Component]:
    workspace = max(g.rows * g.cols for g in linear_shapes(model)) * HALF_BYTES
    dq = "double-quantized absmax" if p.double_quant else "fp32 absmax per 64"
    return [
        Component(
            name="base weights (NF4)",
            bytes=w.base_nf4,
            detail=f"{w.quantized_params:,} params, {dq}",
        ),
        Component(
            name="base weights (not quantized)",
            bytes=w.base_other,
            detail=f"{w.other_params:,} params (embeddings, lm_head, norms) in "
            f"{'fp32' if p.upcast_non_quantized else '16-bit'}",
        ),
        Component(
            name="LoRA weights",
            bytes=w.adapter_bytes,
            detail=f"{w.lora_params:,} params, {p.adapter_dtype}",
        ),
        Component(name="LoRA gradients", bytes=w.adapter_bytes, detail=p.adapter_dtype),
        Component(name="optimizer states", bytes=w.optimizer_bytes, detail=p.optimizer),
        Component(
            name="activations",
            bytes=layer_acts,
            detail=(
                "checkpointed: layer inputs + one layer"
                if p.gradient_checkpointing
                else "all layers"
            )
            + f", {p.micro_batch} × {p.seq_len} tokens",
        ),
        Component(name="logits and loss", bytes=logits, detail=f"vocab {model.vocab_size:,}"),
        Component(
            name="dequantization workspace", bytes=workspace, detail="largest projection in 16-bit"
        ),
        Component(
            name="runtime overhead",
            bytes=round(p.overhead_gb * memory.BYTES_PER_GB),
            detail="CUDA context, workspaces, fragmentation",
        ),
    ]


def budget(params: Params) -> Result:
    """Every byte QLoRA fine-tuning holds on the GPU, the verdict, and the largest
    micro-batch that fits."""
    p = params
    model = get_model(p.model)
    gpu = get_gpu(p.gpu)
    w = _weights(p, model)
    layer_acts, logits, activations = _activation_bytes(model, p, p.micro_batch)
    capacity = memory.gpu_capacity_bytes(gpu, p.capacity_basis)
    components = _components(p, model, w, layer_acts, logits)
    total = sum(c.bytes for c in components)
    headroom = capacity - total
    paged = p.optimizer.startswith("paged")
    if headroom >= 0:
        verdict = "fits"
    elif paged and headroom + w.optimizer_bytes >= 0:
        verdict = "fits only by paging optimizer states to host memory (slower steps)"
    else:
        verdict = "does not fit"

    fixed = total - activations
    max_mb = 0
    for mb in range(1, MAX_MICRO_BATCH + 1):
        if fixed + _activation_bytes(model, p, mb)[2] > capacity:
            break
        max_mb = mb
    base_total = w.base_nf4 + w.base_other
    return Result(
        model=model.id,
        gpu=gpu.id,
        trainable_params=w.lora_params,
        trainable_percent=100 * w.lora_params / (w.quantized_params + w.other_params),
        lora_scaling=p.alpha / p.rank,
        base_quantized_params=w.quantized_params,
        base_bits_per_quantized_param=BITS_PER_BYTE * w.base_nf4 / w.quantized_params,
        base_weights_bytes=base_total,
        base_weights_gb=gb(base_total),
        components=components,
        activations_bytes=activations,
        total_bytes=total,
        total_gb=gb(total),
        total_gib=gib(total),
        gpu_capacity_bytes=capacity,
        gpu_capacity_gb=gb(capacity),
        headroom_bytes=headroom,
        headroom_gb=gb(headroom),
        fits=headroom >= 0,
        verdict=verdict,
        max_micro_batch=max_mb,
        notes=_notes(p, model, gpu),
    )


# The memory bar names the largest components; the rest are summed as "other".
MEMORY_BAR_PARTS = 4


def _memory_figure(r: Result, gpu_name: str, ctx: Context) -> None:
    from labs.viz.charts import memory_plot

    parts = sorted(r.components, key=lambda c: c.bytes, reverse=True)
    shown = [(c.name, float(c.bytes)) for c in parts[:MEMORY_BAR_PARTS]]
    rest = sum(c.bytes for c in parts[MEMORY_BAR_PARTS:])
    verdict = "fits" if r.fits else f"does not fit (over by {-r.headroom_gb:.1f} GB)"
    memory_plot(
        ctx,
        f"Does QLoRA fit on one {gpu_name}?",
        {"training step": shown + ([("other", float(rest))] if rest else [])},
        r.gpu_capacity_bytes,
        caption=f"{r.total_gb:.1f} GB needed against {r.gpu_capacity_gb:.0f} GB: it {verdict}. "
        "The table below lists every component. GB = 10⁹ bytes.",
    )


def present(r: Result, p: Params, ctx: Context) -> None:
    """The memory table, the headline metrics, one bar chart and the notes."""
    model, gpu = get_model(r.model), get_gpu(r.gpu)
    ctx.progress(0.1, "quantizing the base weights (on paper)")
    ctx.progress(0.4, "sizing activations")
    total, capacity = r.total_bytes, r.gpu_capacity_bytes
    _memory_figure(r, gpu.name, ctx)
    ctx.table(
        f"QLoRA memory on {gpu.name} (GB = 1e9 B, GiB = 2^30 B)",
        ["component", "bytes", "GB", "GiB", "detail"],
        [
            [c.name, c.bytes, round(gb(c.bytes), 3), round(gib(c.bytes), 3), c.detail]
            for c in r.components
        ]
        + [
            ["total", total, round(gb(total), 3), round(gib(total), 3), ""],
            [
                f"capacity ({p.capacity_basis})",
                capacity,
                round(gb(capacity), 3),
                round(gib(capacity), 3),
                "",
            ],
        ],
    )
    ctx.metric("trainable_params", r.trainable_params, "params", "LoRA parameters")
    ctx.metric("base_weights_gb", r.base_weights_gb, "GB", "frozen base weights")
    ctx.metric("total_gb", r.total_gb, "GB", "total needed")
    ctx.metric("headroom_gb", r.headroom_gb, "GB", "headroom")
    ctx.metric("max_micro_batch", r.max_micro_batch, "sequences", "largest micro-batch that fits")

    from labs.viz import charts

    ctx.plot(
        f"QLoRA memory by component ({model.name}, r={p.rank})",
        charts.bar_chart(
            [c.name for c in r.components],
            [gb(c.bytes) for c in r.components],
            title=f"Total {gb(total):.1f} GB of {gb(capacity):.1f} GB",
            value_label="GB (1e9 bytes)",
        ),
        {"components": [c.name for c in r.components], "gb": [gb(c.bytes) for c in r.components]},
    )
    for note in r.notes:
        ctx.log(note)
    ctx.log(
        f"{model.name} QLoRA on {gpu.name}: {r.verdict} ({gb(total):.2f} of {gb(capacity):.2f} GB)."
    )
    ctx.progress(1.0, "done")


def _notes(p: Params, model: ModelConfig, gpu: GPU) -> list[str]:
    notes = []
    if not gpu.supports("bf16"):
        notes.append(
            f"{gpu.name} has no bf16: compute in fp16 (bnb_4bit_compute_dtype=float16); bytes are the same."
        )
    if p.upcast_non_quantized:
        notes.append(
            "prepare_model_for_kbit_training upcasts embeddings and lm_head to fp32; "
            "keeping them 16-bit saves half of that line."
        )
    if not p.gradient_checkpointing:
        notes.append(
            "Without gradient checkpointing every layer keeps its activations until backward."
        )
    if model.is_moe and any(t in ("gate", "up", "down") for t in p.target_modules):
        notes.append(
            f"MLP adapters are added to each of the {model.num_experts} experts of every layer."
        )
    return notes


LAB = Lab(
    id="qlora-budget",
    title="QLoRA budget: fine-tune a 4-bit model on one GPU",
    summary="Add up NF4 base weights, LoRA adapters from the real projection shapes, gradients, "
    "optimizer states, activations and logits, and see whether QLoRA fits on one card.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("trainable_params", "params"),
        ("base_weights_gb", "GB"),
        ("total_gb", "GB"),
        ("headroom_gb", "GB"),
        ("max_micro_batch", "sequences"),
    ),
    headline=headlines.qlora_budget,
    concept=concepts.qlora_budget,
)
