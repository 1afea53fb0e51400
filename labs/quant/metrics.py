"""Error metrics for a quantized tensor against its input.

``error_report(x, q)`` returns an ``ErrorReport`` (``.as_dict()`` for JSON; it also reads
like a dict: ``report["sqnr_db"]``). Definitions, with e = dequantize(q) - x over the N
elements of x (sums in float64):

- ``mse`` = sum(e**2) / N; ``rmse`` = sqrt(mse); ``max_abs_error``, ``mean_abs_error``.
- ``sqnr_db`` = 10 * log10(sum(x**2) / sum(e**2)); +inf when e is all zero.
- Clipping vs rounding. Each block can produce values only in [lo, hi] = its element
  range times its decoded scale, plus its offset (``QuantizedTensor.block_bounds``).
  An element is *clipped* when x < lo or x > hi: it lay beyond the representable range of
  its block (an NVFP4 or GGUF block scale rounded down, an MX floor scale, an outlier
  under a per-tensor scale). ``clipping_mse`` = sum(e**2 over clipped elements) / N and
  ``rounding_mse`` = sum(e**2 over the others) / N, so they add up to ``mse``;
  ``clipped_count`` and ``clipped_fraction`` count the clipped elements.
- ``bits_per_value`` = 8 * nbytes / N: effective bits, padding and per-tensor scales
  included. ``scale_overhead_bytes`` = nbytes - payload bytes: every byte that is not an
  element code (block scales, zero points, tensor scales).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from labs.quant import constants as C

if TYPE_CHECKING:
    import torch

    from labs.quant.core import QuantizedTensor

DECIBELS_PER_DECADE = 10.0


@dataclass(frozen=True)
class ErrorReport:
    format: str
    numel: int
    mse: float
    rmse: float
    sqnr_db: float
    max_abs_error: float
    mean_abs_error: float
    rounding_mse: float
    clipping_mse: float
    clipped_count: int
    clipped_fraction: float
    bits_per_value: float
    nbytes: int
    payload_bytes: int
    scale_overhead_bytes: int
    padded: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


def sqnr_db(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio in dB (float64 sums; +inf for no error)."""
    import torch

    signal = x.to(torch.float64).pow(2).sum().item()
    noise = (x_hat.to(torch.float64) - x.to(torch.float64)).pow(2).sum().item()
    return _sqnr(signal, noise)


def _sqnr(signal: float, noise: float) -> float:
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return DECIBELS_PER_DECADE * math.log10(signal / noise)


def clipped_mask(x: torch.Tensor, q: QuantizedTensor) -> torch.Tensor:
    """True where x lay outside its block's representable range [lo, hi]."""
    import torch

    lo, hi = q.block_bounds()
    block_len = q.layout.block_len
    lo_blocks = lo[:, None].expand(-1, block_len)
    hi_blocks = hi[:, None].expand(-1, block_len)
    x32 = x.to(torch.float32)
    return (x32 < q.unblock(lo_blocks)) | (x32 > q.unblock(hi_blocks))


def error_report(x: torch.Tensor, q: QuantizedTensor) -> ErrorReport:
    """Every metric of ``q`` (the result of ``quantize(x, ...)``) against ``x``."""
    import torch

    if tuple(x.shape) != q.shape:
        raise ValueError(f"x has shape {tuple(x.shape)} but q was quantized from {q.shape}")
    x64 = x.to(torch.float64)
    err = q.dequantize().to(torch.float64) - x64
    sq = err.pow(2)
    n = x.numel()
    clipped = clipped_mask(x, q)
    clipping_sse = sq[clipped].sum().item()
    total_sse = sq.sum().item()
    mse = total_sse / n
    clipped_count = int(clipped.sum().item())
    return ErrorReport(
        format=q.key,
        numel=n,
        mse=mse,
        rmse=math.sqrt(mse),
        sqnr_db=_sqnr(x64.pow(2).sum().item(), total_sse),
        max_abs_error=err.abs().max().item(),
        mean_abs_error=err.abs().mean().item(),
        rounding_mse=(total_sse - clipping_sse) / n,
        clipping_mse=clipping_sse / n,
        clipped_count=clipped_count,
        clipped_fraction=clipped_count / n,
        bits_per_value=C.BITS_PER_BYTE * q.nbytes / n,
        nbytes=q.nbytes,
        payload_bytes=q.payload_nbytes,
        scale_overhead_bytes=q.nbytes - q.payload_nbytes,
        padded=q.padded,
    )
