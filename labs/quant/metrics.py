"""Error metrics for a quantized tensor against its input.

``error_report(x, q)`` returns an ``ErrorReport`` (``.as_dict()`` for JSON; it also reads
like a dict: ``report["sqnr_db"]``). Definitions, with e = dequantize(q) - x over the N
elements of x (sums in float64):

- ``mse`` = sum(e**2) / N; ``rmse`` = sqrt(mse); ``max_abs_error``, ``mean_abs_error``.
- ``sqnr_db`` = 10 * log10(sum(x**2) / sum(e**2)); +inf when e is all zero.
- Clipping vs rounding. Each block can produce values only in [lo, hi] = its element
  range times its decoded scale, plus its offset (``QuantizedTensor.block_bounds``).
  An element is *clipped* when it lies beyond [lo, hi] by more than
  ``CLIP_RELATIVE_TOLERANCE`` times the larger of |lo| and |hi|: it lay beyond the
  representable range of its block (an NVFP4 or GGUF block scale rounded down, an MX
  floor scale, an outlier under a per-tensor scale). The tolerance exists because an
  absmax scale ``amax / qmax`` times ``qmax`` can land a few float32 ulps below amax; that
  is rounding of the scale, not clipping. ``clipping_mse`` = sum(e**2 over clipped
  elements) / N and ``rounding_mse`` = sum(e**2 over the others) / N, so they add up to
  ``mse``; ``clipped_count`` and ``clipped_fraction`` count the clipped elements.
  ``error_split(x, x_hat, clipped)`` computes the same error fields for any
  reconstruction and clipped mask (``clipped_beyond(x, lo, hi)`` for a range of one's own).
- ``bits_per_value`` = 8 * nbytes / N: effective bits, padding and per-tensor scales
  included. ``scale_overhead_bytes`` = nbytes - payload bytes: every byte that is not an
  element code (block scales, zero points, tensor scales).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

import labs.quant.constants as C

if TYPE_CHECKING:
    import torch

    from labs.quant.tensor import QuantizedTensor

DECIBELS_PER_DECADE = 10.0
# An element counts as clipped only when it lies beyond its block's range by more than
# this fraction of the range's largest magnitude. ``amax / qmax * qmax`` in float32 can
# land a few ulps (2**-24 relative each) below amax, which would otherwise flag the
# block's largest value as "clipped" by ~1e-7: an artefact of rounding the scale.
CLIP_RELATIVE_TOLERANCE = 2.0**-20


@dataclass(frozen=True)
class ErrorSplit:
    """The error of a reconstruction, split into rounding and clipping (see the module)."""

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


@dataclass(frozen=True)
class ErrorReport(ErrorSplit):
    """The error split of a quantized tensor, with its format and storage."""

    format: str
    bits_per_value: float
    nbytes: int
    payload_bytes: int
    scale_overhead_bytes: int
    padded: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


class ErrorSummary(BaseModel):
    """An ``ErrorSplit`` as a lab result stores it (JSON: SQNR ``None`` instead of ±inf);
    MSE in the tensor's units squared. The one type every lab returns its error split in."""

    mse: float
    rmse: float
    max_abs_error: float
    mean_abs_error: float
    sqnr_db: float | None = Field(
        description="10·log10(Σx² / Σerror²) (labs.quant.metrics); None when the error is zero"
    )
    relative_rmse: float | None = Field(
        description="RMS error over RMS value, 10^(−SQNR/20); None for an all-zero input"
    )
    rounding_mse: float = Field(
        description="Share of the MSE from values inside their scale group's range"
    )
    clipping_mse: float = Field(
        description="Share of the MSE from values beyond their scale group's range"
    )
    clipped: int = Field(description="Values beyond their scale group's representable range")
    clipped_fraction: float

    @classmethod
    def of(cls, split: ErrorSplit, *, input_is_zero: bool = False) -> ErrorSummary:
        """From ``error_split``/``error_report``'s split. ``input_is_zero``: the input was
        all zeros, so the relative error is undefined (SQNR alone cannot tell that apart
        from an exact reconstruction)."""
        finite = math.isfinite(split.sqnr_db)
        relative: float | None = None
        if not input_is_zero and split.sqnr_db != -math.inf:
            relative = 10 ** (-split.sqnr_db / 20) if finite else 0.0
        return cls(
            mse=split.mse,
            rmse=split.rmse,
            max_abs_error=split.max_abs_error,
            mean_abs_error=split.mean_abs_error,
            sqnr_db=split.sqnr_db if finite else None,
            relative_rmse=relative,
            rounding_mse=split.rounding_mse,
            clipping_mse=split.clipping_mse,
            clipped=split.clipped_count,
            clipped_fraction=split.clipped_fraction,
        )


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


def element_bounds(q: QuantizedTensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element of ``q``'s input: the smallest and largest value its block can
    produce (float32, shaped like the input)."""
    lo, hi = q.block_bounds()
    blocks = (q.layout.n_blocks, q.layout.block_len)
    return q.unblock(lo[:, None].expand(blocks)), q.unblock(hi[:, None].expand(blocks))


def clipped_beyond(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """True where ``x`` lies beyond [lo, hi] by more than ``CLIP_RELATIVE_TOLERANCE`` of
    the range's largest magnitude (``lo`` and ``hi`` broadcast against ``x``; float64)."""
    import torch

    x64 = x.to(torch.float64)
    lo64, hi64 = lo.to(torch.float64), hi.to(torch.float64)
    bound = torch.maximum(lo64.abs(), hi64.abs())
    overshoot = (x64 - torch.minimum(torch.maximum(x64, lo64), hi64)).abs()
    return overshoot > CLIP_RELATIVE_TOLERANCE * bound


def clipped_mask(x: torch.Tensor, q: QuantizedTensor) -> torch.Tensor:
    """True where x lay outside its block's representable range [lo, hi] (beyond the
    tolerance; see the module docstring)."""
    return clipped_beyond(x, *element_bounds(q))


def error_split(x: torch.Tensor, x_hat: torch.Tensor, clipped: torch.Tensor) -> ErrorSplit:
    """Error of ``x_hat`` against ``x`` (same shape), with ``clipped`` (bool, same shape)
    marking the elements whose error counts as clipping error; sums in float64."""
    import torch

    if tuple(x_hat.shape) != tuple(x.shape) or tuple(clipped.shape) != tuple(x.shape):
        raise ValueError(
            f"x {tuple(x.shape)}, x_hat {tuple(x_hat.shape)} and clipped "
            f"{tuple(clipped.shape)} must have the same shape"
        )
    x64 = x.to(torch.float64)
    err = x_hat.to(torch.float64) - x64
    sq = err.pow(2)
    n = x.numel()
    clipping_sse = sq[clipped].sum().item()
    total_sse = sq.sum().item()
    mse = total_sse / n
    clipped_count = int(clipped.sum().item())
    return ErrorSplit(
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
    )


def _blockwise_split(x: torch.Tensor, x_hat: torch.Tensor, q: QuantizedTensor) -> ErrorSplit:
    """``error_split(x, x_hat, clipped_mask(x, q))`` for a tensor without padding, chunk
    by chunk of blocks (on CPU threads): every float64 temporary stays chunk-sized and
    the per-block range is broadcast, never expanded to the tensor's size. The float64
    sums add the chunks' partial sums, so they may differ from the one-pass sums in the
    last bits."""
    import torch

    from labs.quant.core import _chunk_blocks, _map_chunks

    layout = q.layout
    xb = x.reshape(layout.n_blocks, layout.block_len)
    hb = x_hat.reshape(layout.n_blocks, layout.block_len)
    lo, hi = (v.reshape(-1).expand(layout.n_blocks) for v in q.block_bounds())  # one
    step = _chunk_blocks(layout.block_len, x.device)  # scale for the tensor: expand

    def partial(start: int) -> torch.Tensor:
        stop = start + step
        x64 = xb[start:stop].to(torch.float64)
        err = hb[start:stop].to(torch.float64).sub_(x64)
        clipped = clipped_beyond(x64, lo[start:stop, None], hi[start:stop, None])
        sq = err * err
        abs_err = err.abs_()
        return torch.stack(
            [
                sq.sum(),
                torch.where(clipped, sq, 0.0).sum(),
                clipped.sum().to(torch.float64),
                abs_err.amax(),
                abs_err.sum(),
                x64.mul_(x64).sum(),
            ]
        )

    parts = _map_chunks(partial, range(0, layout.n_blocks, step), x.device)
    stacked = torch.stack(parts)
    totals = stacked.sum(dim=0).tolist()
    total_sse, clipping_sse, clipped_f, _, abs_sum, signal = totals
    max_abs = float(stacked[:, 3].amax())
    n = x.numel()
    mse = total_sse / n
    clipped_count = round(clipped_f)
    return ErrorSplit(
        numel=n,
        mse=mse,
        rmse=math.sqrt(mse),
        sqnr_db=_sqnr(signal, total_sse),
        max_abs_error=max_abs,
        mean_abs_error=abs_sum / n,
        rounding_mse=(total_sse - clipping_sse) / n,
        clipping_mse=clipping_sse / n,
        clipped_count=clipped_count,
        clipped_fraction=clipped_count / n,
    )


def error_report(
    x: torch.Tensor, q: QuantizedTensor, x_hat: torch.Tensor | None = None
) -> ErrorReport:
    """Every metric of ``q`` (the result of ``quantize(x, ...)``) against ``x``.
    ``x_hat``: ``q.dequantize()`` when the caller already has it (saves decoding twice)."""
    if tuple(x.shape) != q.shape:
        raise ValueError(f"x has shape {tuple(x.shape)} but q was quantized from {q.shape}")
    if x_hat is None:
        x_hat = q.dequantize()
    elif tuple(x_hat.shape) != q.shape:
        raise ValueError(f"x_hat has shape {tuple(x_hat.shape)}, not {q.shape}")
    if q.layout.padded == 0:
        split = _blockwise_split(x, x_hat, q)
    else:
        split = error_split(x, x_hat, clipped_mask(x, q))
    return ErrorReport(
        format=q.key,
        **asdict(split),
        bits_per_value=C.BITS_PER_BYTE * q.nbytes / split.numel,
        nbytes=q.nbytes,
        payload_bytes=q.payload_nbytes,
        scale_overhead_bytes=q.nbytes - q.payload_nbytes,
        padded=q.padded,
    )
