"""qlora-budget's computation: what ``run`` does, emitting its progress."""

from __future__ import annotations

import math
from dataclasses import dataclass

from labs.base import Context
from labs.catalog import memory
from labs.catalog.formats import BITS_PER_BYTE, NF4_BLOCK
from labs.catalog.gpus import GPU, get_gpu
from labs.catalog.memory import gb, gib
from labs.catalog.models import (
    LORA_TARGET_KINDS,
    ModelConfig,
    get_model,
    linear_shapes,
    tensor_groups,
)
from labs.qlora_budget.model import (
    ADAM_STATES,
    BNB_MIN_8BIT_SIZE,
    BNB_STATE_BLOCK,
    DQ_ABSMAX_BYTES,
    DQ_BLOCK,
    DQ_OFFSET_BYTES,
    DROPOUT_MASK_BYTES,
    FLASH_LSE_BYTES,
    FP32_BYTES,
    HALF_BYTES,
    MAX_MICRO_BATCH,
    NF4_BITS,
    Component,
    Params,
    Result,
)


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
        group = next(g for g in tensor_groups(model) if g.kind == LORA_TARGET_KINDS[target])
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
    ctx.progress(0.1, "quantizing the base weights (on paper) and sizing activations")
    return budget(params)


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
    targeted = [g for g in linears if g.kind in {LORA_TARGET_KINDS[t] for t in p.target_modules}]
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
