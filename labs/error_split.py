"""The error split a lab returns: labs.quant.metrics' ``ErrorSplit`` as a result model.

Shared by the labs that split quantization error into rounding and clipping
(granularity-compare, scale-derivation). Importing it imports no torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from labs.quant import metrics


class ErrorSplit(BaseModel):
    """Quantization error of one tensor; MSE in the tensor's units squared."""

    mse: float
    rmse: float
    max_abs_error: float
    sqnr_db: float | None = Field(description="10·log10(Σx² / Σerror²); None when the error is 0")
    rounding_mse: float = Field(description="Share of the MSE from values inside their range")
    clipping_mse: float = Field(description="Share of the MSE from values beyond their range")
    clipped: int = Field(description="Values beyond their scale group's representable range")

    @classmethod
    def from_metrics(cls, split: metrics.ErrorSplit) -> ErrorSplit:
        """From labs.quant.metrics' split (``error_split``): SQNR None instead of ±inf."""
        return cls(
            mse=split.mse,
            rmse=split.rmse,
            max_abs_error=split.max_abs_error,
            sqnr_db=split.sqnr_db if math.isfinite(split.sqnr_db) else None,
            rounding_mse=split.rounding_mse,
            clipping_mse=split.clipping_mse,
            clipped=split.clipped_count,
        )
