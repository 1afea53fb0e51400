"""format-support's parameters and result (no torch, no I/O)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from labs.base import LabParams, LabResult
from labs.catalog.formats import CheckpointFormatKey
from labs.catalog.gpus import GpuId
from labs.catalog.kernel_paths import Path
from labs.catalog.models import ModelId

if TYPE_CHECKING:
    GpuChoice = str
else:
    GpuChoice = Literal[GpuId, "auto"]


# --- parameters and result ---------------------------------------------------


class Params(LabParams):
    format: CheckpointFormatKey = Field(
        default="nvfp4",
        description="Checkpoint format: bf16, fp16, fp8 (W8A8 E4M3), int8 (weight-only), "
        "w8a8-int8, awq / gptq (int4 weight-only, group 128), mxfp4, nvfp4, q4_0 (GGUF).",
    )
    gpu: GpuChoice = Field(
        default="h100",
        description="GPU from the registry, or 'auto' for this worker's own GPU (read with "
        "nvidia-smi; a worker without one falls back to the registry comparison).",
    )
    model: ModelId = Field(
        default="llama-3.1-8b",
        description="Model whose weights are sized in GB for each GPU (shapes from its "
        "config.json; embeddings and norms stay bf16 in quantized formats).",
    )


class GpuPath(BaseModel):
    gpu: str
    name: str
    compute_capability: str
    path: Path
    kernel: str
    compute: str = Field(description="Type the matmul runs in")
    resident_bits_per_param: float
    weights_gb: float = Field(description="Weights held on the GPU, GB = 1e9 bytes")
    fits_weights_only: bool | None
    decode_tokens_per_s_bound: float | None = Field(
        description="Batch-1 decode upper bound, tokens/s: peak bandwidth / the weight bytes "
        "a step reads (every weight but the embedding table, of which it reads one row; the "
        "lm_head in full; MoE: the routed experts only)"
    )
    compute_speedup: float | None = Field(description="Peak matmul rate over the 16-bit peak")


class SourceRef(BaseModel):
    title: str
    url: str


class Result(LabResult):
    format: str
    format_title: str
    gpu: str
    gpu_name: str
    compute_capability: str
    path: Path
    meaning: str
    kernel: str
    compute: str
    upcast_to: str | None
    native: bool
    file_bits_per_param: float
    resident_bits_per_param: float
    decode_bytes_ratio: float = Field(
        description="Per projection matrix: resident bits per parameter / 16, the weight bytes "
        "a decode step reads for the quantized matrices relative to bf16 (embeddings, lm_head "
        "and norms, which stay bf16, are left out; see decode_speedup_bound_whole_model)"
    )
    decode_speedup_bound: float = Field(
        description="Per projection matrix: bf16 weight bytes / this path's, the memory-bound "
        "decode speedup if only the quantized matrices were read"
    )
    decode_speedup_bound_whole_model: float = Field(
        description="Whole model: bf16's weight bytes read per batch-1 decode step / this "
        "path's (lm_head in full, one embedding row, MoE: routed experts only), the same "
        "basis as weights_file_gb and weights_resident_gb"
    )
    compute_speedup: float | None
    model: str
    weights_file_gb: float
    weights_resident_gb: float
    verdict: str
    speed: str
    memory: str
    notes: list[str]
    detected: str | None = Field(description="What nvidia-smi reported, with gpu='auto'")
    per_gpu: list[GpuPath]
    sources: list[SourceRef]
