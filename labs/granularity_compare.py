"""Lab ``granularity-compare``: one tensor, six scale granularities, one format.

The same tensor (normal, uniform, Laplace, or normal with injected outliers) is
quantized to one of the formats whose scale granularity is an option in
labs.quant (int8, int4, fp8_e4m3, fp8_e5m2): one scale per tensor, one per row
(channel), and one per block of 16, 32, 64 and 128 elements along the row. For
each the lab reports the error (MSE, SQNR, max |error|, split into rounding and
clipping error), the bytes the scales cost and the bits per value they imply,
and which granularity buys the most SQNR per stored bit. An outlier forces a
large scale on every value that shares it; smaller scale groups confine the
damage, at the price of more scales.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, field_validator

from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU
from labs.presenters import concepts, headlines
from labs.quant.metrics import ErrorSummary
from labs.quant.spec import FormatKey

if TYPE_CHECKING:
    import torch

# The labs.quant formats that take a ``granularity`` option (a test checks them).
GranularFormatKey = Literal[FormatKey.INT8, FormatKey.INT4, FormatKey.FP8_E4M3, FormatKey.FP8_E5M2]
Distribution = Literal["normal", "uniform", "laplace", "outliers"]

MAX_ROWS = 1024
MAX_COLS = 4096
DEFAULT_SHAPE = (256, 1024)
MAX_SEED = 2**31 - 1
DEFAULT_OUTLIER_SCALE = 50.0
MAX_OUTLIER_SCALE = 10_000.0
DEFAULT_OUTLIER_FRACTION = 0.001  # LLM activations: a few values ~20-100× the rest
MAX_OUTLIER_FRACTION = 0.1
BLOCK_SIZES = (16, 32, 64, 128)
GRANULARITIES: tuple[str | int, ...] = ("tensor", "channel", *BLOCK_SIZES)
# The block size whose numbers are also returned at the top level of the result.
HEADLINE_BLOCK = 32
BITS_PER_BYTE = 8
# One more bit of a uniform quantizer's resolution halves its step: 20·log10(2) dB.
DB_PER_BIT = 20 * math.log10(2)
HISTOGRAM_BINS = 20
# The chart bins a random sample of at most this many errors per granularity.
PLOT_SAMPLE = 20_000
# The chart's smallest |error| bin starts at this quantile of the non-zero errors.
HISTOGRAM_LOW_QUANTILE = 0.001
PERCENT = 100.0
# Keeps the Laplace inverse CDF finite (log of 0 at u = 0 or 1).
LAPLACE_U_MIN = 1e-7


def granularity_label(g: str | int) -> str:
    return f"block {g}" if isinstance(g, int) else str(g)


class Params(LabParams):
    format: GranularFormatKey = Field(
        default=FormatKey.INT4,
        description="Format to quantize to: int8, int4 (symmetric, float32 scales), fp8_e4m3 or "
        "fp8_e5m2 (float32 scales) — the labs.quant formats whose scale granularity is an option",
    )
    shape: list[int] = Field(
        default=list(DEFAULT_SHAPE),
        min_length=2,
        max_length=2,
        description=f"[rows, cols] of the tensor, rows 1 to {MAX_ROWS}, cols 1 to {MAX_COLS}; "
        "blocks and channels run along the rows (cols elements each)",
    )
    distribution: Distribution = Field(
        default="outliers",
        description="normal, uniform (-1..1), laplace (heavy-tailed), or outliers (normal with "
        "outlier_fraction of the values multiplied by outlier_scale)",
    )
    outlier_scale: float = Field(
        default=DEFAULT_OUTLIER_SCALE,
        ge=1.0,
        le=MAX_OUTLIER_SCALE,
        description="With distribution outliers: the factor the outliers are multiplied by",
    )
    outlier_fraction: float = Field(
        default=DEFAULT_OUTLIER_FRACTION,
        gt=0.0,
        le=MAX_OUTLIER_FRACTION,
        description="With distribution outliers: the share of values made outliers "
        "(at least one value)",
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Random seed for the tensor")

    @field_validator("shape")
    @classmethod
    def _dims(cls, shape: list[int]) -> list[int]:
        for name, n, top in (("rows", shape[0], MAX_ROWS), ("cols", shape[1], MAX_COLS)):
            if not 1 <= n <= top:
                raise ValueError(f"{name} must be between 1 and {top}, not {n}")
        return shape


class GranularityRow(BaseModel):
    granularity: str
    n_scales: int
    nbytes: int = Field(description="Every stored byte: codes, scales (and padding)")
    scale_overhead_bytes: int = Field(description="Bytes of scales alone")
    bits_per_value: float = Field(description="8 · nbytes / values")
    error: ErrorSummary
    sqnr_db_per_bit: float | None = Field(description="SQNR (dB) / bits per value")
    db_per_extra_bit: float | None = Field(
        description="SQNR gained over per-tensor scales per extra stored bit (dB/bit); "
        f"widening the element by one bit buys about {DB_PER_BIT:.2f} dB"
    )


class Result(LabResult):
    format: str
    shape: list[int]
    distribution: str
    numel: int
    tensor_absmax: float
    rows: list[GranularityRow]
    best_by_sqnr: str
    best_by_sqnr_per_bit: str
    sqnr_db_tensor: float | None
    sqnr_db_block_32: float | None
    sqnr_gain_db_block_32: float | None = Field(description="SQNR of block 32 − per tensor, dB")
    scale_overhead_bytes_block_32: int
    bits_per_value_block_32: float


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


def run(params: Params, ctx: Context) -> Result:
    comparison = compare(params, ctx.device)
    present(comparison, params, ctx)
    return comparison.result


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


def compare(params: Params, device: str) -> Comparison:
    """Quantize one tensor at every granularity; bytes, bits per value and error of each."""
    rows, cols = params.shape
    x = make_tensor(
        rows, cols, params.distribution, params.seed, params.outlier_scale, params.outlier_fraction
    ).to(device)
    results: list[GranularityRow] = []
    errors: dict[str, torch.Tensor] = {}
    base: GranularityRow | None = None
    for g in GRANULARITIES:
        row, errors[granularity_label(g)] = _row(x, params.format, g, base)
        base = base or row
        results.append(row)
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


# --- presenting ----------------------------------------------------------------


def present(comparison: Comparison, params: Params, ctx: Context) -> None:
    """Emit the run's events, in the order the run page shows them."""
    r = comparison.result
    rows, cols = r.shape
    ctx.progress(0.02, "making the tensor")
    detail = ""
    if params.distribution == "outliers":
        n_outliers = outlier_count(r.numel, params.outlier_fraction)
        # The count as well as the share: one outlier in 2**18 values rounds to 0.00 %.
        detail = (
            f" ({n_outliers} outlier{'s' if n_outliers != 1 else ''}, "
            f"{PERCENT * n_outliers / r.numel:.3g}% of values, ×{params.outlier_scale:g})"
        )
    ctx.log(
        f"x: {params.distribution}{detail}, {rows}×{cols} float32 (seed {params.seed}), "
        f"absmax {r.tensor_absmax:.4g}; format {params.format}"
    )
    for i, g in enumerate(GRANULARITIES):
        label = granularity_label(g)
        ctx.progress(0.05 + 0.8 * i / len(GRANULARITIES), f"{params.format}, {label} scales")
    _table(r, ctx)
    _metrics(r, ctx)
    ctx.progress(0.88, "charts")
    _plots(comparison, ctx)
    ctx.progress(1.0, "done")


def _table(r: Result, ctx: Context) -> None:
    rows, cols = r.shape
    ctx.table(
        f"{r.format}: {rows}×{cols} {r.distribution} values, one row per scale granularity",
        [
            "granularity",
            "scales",
            "scale bytes",
            "bits/value",
            "MSE",
            "SQNR dB",
            "max |error|",
            "rounding MSE",
            "clipping MSE",
            "clipped",
            "dB per bit",
            "dB per extra bit vs tensor",
        ],
        [
            [
                g.granularity,
                g.n_scales,
                g.scale_overhead_bytes,
                round(g.bits_per_value, 4),
                g.error.mse,
                None if g.error.sqnr_db is None else round(g.error.sqnr_db, 2),
                g.error.max_abs_error,
                g.error.rounding_mse,
                g.error.clipping_mse,
                g.error.clipped,
                None if g.sqnr_db_per_bit is None else round(g.sqnr_db_per_bit, 3),
                None if g.db_per_extra_bit is None else round(g.db_per_extra_bit, 2),
            ]
            for g in r.rows
        ],
    )


def _metrics(r: Result, ctx: Context) -> None:
    for g in r.rows:
        if g.error.sqnr_db is not None:
            ctx.metric(
                f"sqnr_db_{g.granularity.replace(' ', '_')}",
                g.error.sqnr_db,
                "dB",
                f"SQNR, {g.granularity}",
            )
    ctx.metric(
        "scale_overhead_bytes_block_32",
        r.scale_overhead_bytes_block_32,
        "bytes",
        "scale bytes, block 32",
    )
    ctx.metric(
        "bits_per_value_block_32", r.bits_per_value_block_32, "bits", "bits per value, block 32"
    )
    ctx.log(
        f"Best SQNR: {r.best_by_sqnr}. Best SQNR per stored bit: {r.best_by_sqnr_per_bit}. "
        f"Each scale is a float32 (4 bytes): block b adds 32/b bits per value. "
        f"For comparison, one more element bit buys about {DB_PER_BIT:.2f} dB."
    )
    if sum(g.error.clipped for g in r.rows) == 0:
        ctx.log(
            "No value was clipped: every scale here is absmax / max code, so the largest "
            "value of each group lands exactly on the largest code and the whole error is rounding."
        )


def _plots(comparison: Comparison, ctx: Context) -> None:
    from labs.viz import charts

    r = comparison.result
    tensor = r.rows[0].error
    ctx.plot(
        "Where the error comes from, per scale granularity",
        charts.error_split_bars(
            [g.granularity for g in r.rows],
            [g.error.rounding_mse for g in r.rows],
            [g.error.clipping_mse for g in r.rows],
            title=f"{r.format}: rounding vs clipping error by granularity",
        ),
        {
            "lead": True,
            "caption": f"One scale for the whole tensor gives an MSE of {tensor.mse:.3g}; "
            f"smaller groups shrink the step (and the error) at the cost of more scales. "
            f"Best SQNR: {r.best_by_sqnr}; best per stored bit: {r.best_by_sqnr_per_bit}.",
            "table": {
                "columns": [
                    "granularity",
                    "rounding MSE",
                    "clipping MSE",
                    "SQNR (dB)",
                    "bits/value",
                ],
                "rows": [
                    [
                        g.granularity,
                        g.error.rounding_mse,
                        g.error.clipping_mse,
                        g.error.sqnr_db,
                        g.bits_per_value,
                    ]
                    for g in r.rows
                ],
            },
        },
    )
    if comparison.centres:
        ctx.plot(
            "Distribution of |error| per granularity",
            charts.line_chart(
                {name: (comparison.centres, share) for name, share in comparison.shares.items()},
                title=f"{r.format}: error histogram per granularity",
                x_label="log2 |dequantized − value|",
                y_label="share of values (%)",
            ),
            {
                "log2_abs_error_bin_centres": comparison.centres,
                "share_percent": comparison.shares,
                "exact_values": comparison.exact,
            },
        )
    ctx.plot(
        "SQNR per granularity",
        charts.bar_chart(
            [g.granularity for g in r.rows],
            [g.error.sqnr_db or 0.0 for g in r.rows],
            title=f"{r.format}: SQNR by scale granularity",
            value_label="SQNR (dB)",
        ),
        {
            g.granularity: {"sqnr_db": g.error.sqnr_db, "bits_per_value": g.bits_per_value}
            for g in r.rows
        },
    )


LAB = Lab(
    id="granularity-compare",
    title="Scale granularity: per tensor, per channel, per block",
    summary="Quantize one tensor (optionally with outliers) to int8, int4 or FP8 with one scale "
    "per tensor, per channel and per block of 16/32/64/128: error split into rounding and "
    "clipping, scale overhead in bytes and bits per value, and the SQNR each extra bit buys.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    time_limit_s=120.0,
    memory_limit_mb=2048,
    numeric_outputs=(
        ("sqnr_db_tensor", "dB"),
        ("sqnr_db_block_32", "dB"),
        ("sqnr_gain_db_block_32", "dB"),
        ("scale_overhead_bytes_block_32", "bytes"),
        ("bits_per_value_block_32", "bits"),
    ),
    headline=headlines.granularity_compare,
    concept=concepts.granularity_compare,
)
