"""qlora-budget's parameters and result (no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from labs.base import LabResult
from labs.catalog import memory
from labs.catalog.memory import CapacityBasis
from labs.catalog.params import ContextTokens, ModelOnGpuParams, RegistryGpu, RegistryModel

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


# The memory bar names the largest components; the rest are summed as "other".
MEMORY_BAR_PARTS = 4
