"""reproducibility's parameters and result (no torch); the drill is described in the
package's docstring (``labs.reproducibility``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from labs.base import LabParams, LabResult

LowPrecision = Literal["int8", "fp8", "both"]

MAX_SEED = 2**31 - 1
MAX_BATCH = 4096
MAX_WIDTH = 4096
MAX_CLASSES = 1000
INT8_MAX = 127  # symmetric int8: codes -127..127 (-128 unused, so the grid is symmetric)
FP8_E4M3_MAX = 448.0  # largest finite float8_e4m3fn value
# Scales are clamped away from zero so an all-zero row divides cleanly.
MIN_SCALE = 1e-12
# cuBLAS needs a fixed workspace for deterministic results (CUDA >= 10.2);
# see the cuBLAS "Results reproducibility" section.
CUBLAS_WORKSPACE_CONFIG = ":4096:8"
FINGERPRINT_HEX_CHARS = 16
TEST_CASE_LOGITS_SHOWN = 10


class Params(LabParams):
    seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="Seed for the weights and the input batch."
    )
    batch: int = Field(
        default=256,
        ge=2,
        le=MAX_BATCH,
        description="Inputs in the batch (top-1 agreement is over all of them).",
    )
    in_features: int = Field(default=64, ge=2, le=MAX_WIDTH, description="Input width of the MLP.")
    hidden: int = Field(default=256, ge=2, le=MAX_WIDTH, description="Hidden width of the MLP.")
    classes: int = Field(
        default=10, ge=2, le=MAX_CLASSES, description="Output logits (classes) per input."
    )
    low_precision: LowPrecision = Field(
        default="both",
        description="Weight format(s) compared with fp32: int8 (symmetric, per output channel), "
        "fp8 (E4M3, one scale per tensor) or both.",
    )
    deterministic: bool = Field(
        default=True,
        description="Run with torch.use_deterministic_algorithms(True) (and a fixed cuBLAS "
        "workspace on CUDA).",
    )
    test_case: int = Field(
        default=0,
        ge=0,
        le=MAX_BATCH - 1,
        description="Index of the input whose logits are shown in full.",
    )

    @field_validator("test_case")
    @classmethod
    def _inside_batch(cls, v: int, info: ValidationInfo) -> int:
        batch = info.data.get("batch")
        if batch is not None and v >= batch:
            raise ValueError(f"test_case {v} is outside the batch of {batch} (0..{batch - 1})")
        return v


class Environment(BaseModel):
    torch: str
    python: str
    platform: str
    device: str
    device_name: str
    cuda: str | None
    cudnn: int | None
    threads: int
    dtype: str
    float32_matmul_precision: str
    deterministic_algorithms: bool
    cublas_workspace_config: str | None


class Comparison(BaseModel):
    format: str
    quantizer: str
    bitwise_equal: bool
    weight_rel_error: float = Field(description="||W_q − W|| / ||W||, both layers together")
    max_abs_diff: float = Field(description="Largest |logit difference| over the batch")
    mean_abs_diff: float
    top1_agreement: float = Field(description="Fraction of inputs whose argmax is unchanged")
    test_case_top1_fp32: int
    test_case_top1: int


class Result(LabResult):
    environment: Environment
    seed: int
    input_shape: list[int]
    test_case: int
    fingerprint: str = Field(description="First hex digits of the SHA-256 of run 1's logits")
    runs_bitwise_equal: bool
    runs_max_abs_diff: float
    batch_invariant: bool = Field(description="Test case alone is bitwise equal to it in the batch")
    batch_max_abs_diff: float
    threads_bitwise_equal: bool | None = Field(description="CPU only: 1 thread vs all threads")
    comparisons: list[Comparison]
    int8_top1_agreement: float | None
    int8_max_abs_diff: float | None
    fp8_top1_agreement: float | None
    fp8_max_abs_diff: float | None
    findings: list[str]
