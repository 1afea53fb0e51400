"""granularity-compare's computation: what ``run`` does, emitting its progress."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from labs.base import Context
from labs.granularity_compare.model import (
    BITS_PER_BYTE,
    DEFAULT_OUTLIER_FRACTION,
    DEFAULT_OUTLIER_SCALE,
    GRANULARITIES,
    HEADLINE_BLOCK,
    HISTOGRAM_BINS,
    HISTOGRAM_LOW_QUANTILE,
    LAPLACE_U_MIN,
    PERCENT,
    PLOT_SAMPLE,
    GranularityRow,
    Params,
    Result,
)
from labs.quant.metrics import ErrorSummary

if TYPE_CHECKING:
    import torch


def granularity_label(g: str | int) -> str:
    return f"block {g}" if isinstance(g, int) else str(g)


def outlier_count(numel: int, outlier_fraction: float) -> int:
    """How many of ``numel`` values ``make_tensor`` makes outliers (at least one)."""
    return max(1, round(outlier_fraction * numel))


def make_tensor(
    rows: int,
    cols: int,
    distribution: str,
    seed: int,
    outlier_scale: float = DEFAULT_OUTLIER_SCALE,
    outlier_fraction: float = DEFAULT_OUTLIER_FRACTION,
) -> torch.Tensor:
    """A float32 (rows, cols) tensor drawn on the CPU from ``distribution`` with ``seed``."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    if distribution == "uniform":
        return torch.rand(rows, cols, generator=g) * 2 - 1
    if distribution == "laplace":
        # Inverse CDF of the standard Laplace distribution.
        u = torch.rand(rows, cols, generator=g).clamp(LAPLACE_U_MIN, 1 - LAPLACE_U_MIN) - 0.5
        return -torch.sign(u) * torch.log1p(-2 * u.abs())
    x = torch.randn(rows, cols, generator=g)
    if distribution == "outliers":
        n = outlier_count(x.numel(), outlier_fraction)
        idx = torch.randperm(x.numel(), generator=g)[:n]
        x.view(-1)[idx] *= outlier_scale
    return x


def _abs_error_histograms(
    errors: dict[str, torch.Tensor], seed: int
) -> tuple[list[float], dict[str, list[float]], dict[str, int]]:
    """|error| of each granularity binned on shared bins of log2 |error|: the bin centres
    (log2 of the error), the share of values (%) in each bin, and the count of exact
    (zero-error) values, which have no logarithm."""
    import torch

    nonzero = {name: e.abs()[e != 0] for name, e in errors.items()}
    pooled = torch.cat([v for v in nonzero.values() if v.numel()])
    if pooled.numel() == 0:
        return [], {}, {name: e.numel() for name, e in errors.items()}
    g = torch.Generator(device="cpu").manual_seed(seed)
    sample = pooled[torch.randperm(pooled.numel(), generator=g)[:PLOT_SAMPLE]]
    lo = math.log2(float(torch.quantile(sample.double(), HISTOGRAM_LOW_QUANTILE)))
    hi = math.log2(float(pooled.max()))
    if hi <= lo:
        lo, hi = lo - 1, hi + 1
    step = (hi - lo) / HISTOGRAM_BINS
    centres = [lo + (i + 0.5) * step for i in range(HISTOGRAM_BINS)]
    shares = {}
    for name, v in nonzero.items():
        counts = torch.histc(v.double().log2().clamp(lo, hi), bins=HISTOGRAM_BINS, min=lo, max=hi)
        shares[name] = [PERCENT * float(c) / errors[name].numel() for c in counts]
    exact = {name: errors[name].numel() - v.numel() for name, v in nonzero.items()}
    return centres, shares, exact


def _score(row: GranularityRow, value: float | None) -> float:
    """Rank by ``value``; a zero error (SQNR None) is the best there is, not the worst."""
    if row.error.mse == 0:
        return math.inf
    return -math.inf if value is None else value


@dataclass(frozen=True)
class Comparison:
    """The computed result and the |error| histograms its figure shows."""

    result: Result
    centres: list[float]  # log2 |error| bin centres
    shares: dict[str, list[float]]  # per granularity, % of values per bin
    exact: dict[str, int]  # per granularity, values with zero error (outside the bins)


def run(params: Params, ctx: Context) -> Comparison:
    return compare(params, ctx.device, ctx.progress)


def _no_progress(fraction: float, message: str = "") -> None:
    pass


def _row(
    x: torch.Tensor, fmt: str, g: str | int, base: GranularityRow | None
) -> tuple[GranularityRow, torch.Tensor]:
    """One granularity's bytes and error, and its error tensor (flattened, on the CPU)."""
    from labs.quant import quantize
    from labs.quant.metrics import clipped_mask, error_split

    q = quantize(x, fmt, granularity=g)
    deq = q.dequantize()
    split = ErrorSummary.of(error_split(x, deq, clipped_mask(x, q)))
    bits = BITS_PER_BYTE * q.nbytes / x.numel()
    per_bit = split.sqnr_db / bits if split.sqnr_db is not None else None
    gain = None
    if base is not None and base.error.sqnr_db is not None and split.sqnr_db is not None:
        extra = bits - base.bits_per_value
        gain = (split.sqnr_db - base.error.sqnr_db) / extra if extra > 0 else None
    row = GranularityRow(
        granularity=granularity_label(g),
        n_scales=int(q.scales.numel()),
        nbytes=q.nbytes,
        scale_overhead_bytes=q.nbytes - q.payload_nbytes,
        bits_per_value=bits,
        error=split,
        sqnr_db_per_bit=per_bit,
        db_per_extra_bit=gain,
    )
    return row, (deq - x).reshape(-1).cpu()


def compare(
    params: Params, device: str, progress: Callable[[float, str], None] = _no_progress
) -> Comparison:
    """Quantize one tensor at every granularity; bytes, bits per value and error of each.
    ``progress`` hears of each step as it starts."""
    rows, cols = params.shape
    progress(0.02, "making the tensor")
    x = make_tensor(
        rows, cols, params.distribution, params.seed, params.outlier_scale, params.outlier_fraction
    ).to(device)
    results: list[GranularityRow] = []
    errors: dict[str, torch.Tensor] = {}
    base: GranularityRow | None = None
    for i, g in enumerate(GRANULARITIES):
        label = granularity_label(g)
        progress(0.05 + 0.8 * i / len(GRANULARITIES), f"{params.format}, {label} scales")
        row, errors[label] = _row(x, params.format, g, base)
        base = base or row
        results.append(row)
    progress(0.88, "the error histograms")
    best = max(results, key=lambda r: _score(r, r.error.sqnr_db))
    best_per_bit = max(results, key=lambda r: _score(r, r.sqnr_db_per_bit))
    by_label = {r.granularity: r for r in results}
    tensor_row, block_row = by_label["tensor"], by_label[granularity_label(HEADLINE_BLOCK)]
    gain_32 = (
        block_row.error.sqnr_db - tensor_row.error.sqnr_db
        if block_row.error.sqnr_db is not None and tensor_row.error.sqnr_db is not None
        else None
    )
    result = Result(
        format=params.format,
        shape=[rows, cols],
        distribution=params.distribution,
        numel=x.numel(),
        tensor_absmax=float(x.abs().max()),
        rows=results,
        best_by_sqnr=best.granularity,
        best_by_sqnr_per_bit=best_per_bit.granularity,
        sqnr_db_tensor=tensor_row.error.sqnr_db,
        sqnr_db_block_32=block_row.error.sqnr_db,
        sqnr_gain_db_block_32=gain_32,
        scale_overhead_bytes_block_32=block_row.scale_overhead_bytes,
        bits_per_value_block_32=block_row.bits_per_value,
    )
    return Comparison(result, *_abs_error_histograms(errors, params.seed))
