"""block-quantize's computation: the tensor, its quantization, the error, the first
blocks and the histograms. Torch is imported inside the functions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from labs.base import Context
from labs.block_quantize.model import (
    BF16_BITS,
    BITS_PER_BYTE,
    CENTRAL_MARGIN,
    CENTRAL_TAIL,
    FP32_BITS,
    HISTOGRAM_BINS,
    HISTOGRAM_SAMPLE,
    OUTLIER_FRACTION,
    OUTLIER_RANGE_RATIO,
    OUTLIER_SCALE,
    SHOWN_BLOCKS,
    SHOWN_ELEMENTS_PER_BLOCK,
    BlockQuantizeParams,
    BlockQuantizeResult,
    BlockView,
    Histogram,
)
from labs.quant.metrics import ErrorSummary

if TYPE_CHECKING:
    import torch

    from labs.quant import QuantizedTensor


def _tensor(params: BlockQuantizeParams, device: str) -> torch.Tensor:
    import torch

    rows, cols = params.dims
    if params.distribution == "custom":
        assert params.values is not None
        return torch.tensor(params.values, dtype=torch.float32, device=device).reshape(rows, cols)
    g = torch.Generator(device="cpu").manual_seed(params.seed)
    if params.distribution == "uniform":
        x = torch.rand(rows, cols, generator=g) * 2 - 1
    elif params.distribution == "laplace":
        # Inverse CDF of the standard Laplace distribution.
        u = torch.rand(rows, cols, generator=g).clamp(1e-7, 1 - 1e-7) - 0.5
        x = -torch.sign(u) * torch.log1p(-2 * u.abs())
    else:
        x = torch.randn(rows, cols, generator=g)
        if params.distribution == "outliers":
            n = max(1, round(OUTLIER_FRACTION * x.numel()))
            x.view(-1)[_distinct_indices(x.numel(), n, g)] *= OUTLIER_SCALE
    return x.to(device)


def _distinct_indices(numel: int, n: int, g: torch.Generator) -> torch.Tensor:
    """``n`` distinct indices below ``numel``, uniformly at random: twice as many draws
    with replacement, their distinct values, then n of those in random order (a full
    randperm of 16 Mi took 0.9 s here for 17 k outliers)."""
    import torch

    picked = torch.unique(torch.randint(numel, (2 * n,), generator=g))
    while picked.numel() < n:  # too many repeats (only when n is near numel)
        more = torch.randint(numel, (2 * n,), generator=g)
        picked = torch.unique(torch.cat([picked, more]))
    return picked[torch.randperm(picked.numel(), generator=g)[:n]]


def _blocks(x: torch.Tensor, layout: Any, flat: bool) -> torch.Tensor:
    """``x`` cut into (n_blocks, block_len) the way labs.quant cuts it: rows padded by
    repeating their last value (flat formats cut the flattened tensor)."""
    import torch

    rows = x.reshape(1, -1) if flat else x.reshape(layout.n_rows, layout.row_len)
    pad = layout.padded_row_len - rows.shape[1]
    if pad:
        rows = torch.cat([rows, rows[:, -1:].expand(-1, pad)], dim=1)
    return rows.reshape(layout.n_blocks, layout.block_len)


def _valid(layout: Any, flat: bool, device: Any) -> torch.Tensor:
    import torch

    width = layout.padded_row_len
    mask = torch.arange(width, device=device) < (layout.numel if flat else layout.row_len)
    return mask.expand(1 if flat else layout.n_rows, width).reshape(
        layout.n_blocks, layout.block_len
    )


def _central_range(v: torch.Tensor, lo: float, hi: float) -> tuple[float, float]:
    """The range the histogram shows: all of ``v`` ([lo, hi], its extremes) unless they
    lie far beyond the central 99.8 % (outliers), then that central range widened by a
    margin."""

    sample = v[:: max(1, v.numel() // HISTOGRAM_SAMPLE)].sort().values
    n = sample.numel()
    c_lo = float(sample[int(n * CENTRAL_TAIL)])
    c_hi = float(sample[min(n - 1, int(n * (1 - CENTRAL_TAIL)))])
    span = c_hi - c_lo
    if span <= 0 or (hi - lo) <= OUTLIER_RANGE_RATIO * span:
        return lo, hi
    margin = CENTRAL_MARGIN * span
    return max(lo, c_lo - margin), min(hi, c_hi + margin)


def _bin_counts(v: torch.Tensor, lo: float, hi: float) -> tuple[list[int], int, int]:
    """Counts of ``v`` (1-D float32) in HISTOGRAM_BINS equal bins over [lo, hi] (the last
    one closed, as ``torch.histc``), and the counts below lo and above hi; NaN nowhere.
    One bincount per chunk, the chunks on the run's threads: on 16 Mi values this is 2x
    faster than histc on one thread, and it scales with threads where histc does not."""
    import torch

    from labs.quant.core import CPU_CHUNK_ELEMENTS
    from labs.quant.parallel import map_chunks

    bins = HISTOGRAM_BINS
    below, above, nan = bins, bins + 1, bins + 2  # the extra slots of each bincount
    inv_width = bins / (hi - lo)
    step = CPU_CHUNK_ELEMENTS * 4

    def count(start: int) -> torch.Tensor:
        chunk = v[start : start + step]
        slot = chunk.sub(lo).mul_(inv_width).floor_().clamp_(0, bins - 1)
        slot = torch.where(chunk < lo, below, slot)
        slot = torch.where(chunk > hi, above, slot).nan_to_num_(nan)
        return torch.bincount(slot.to(torch.int32), minlength=bins + 3)

    if v.device.type == "cpu":
        parts = map_chunks(count, range(0, v.numel(), step))
    else:
        parts = [count(start) for start in range(0, v.numel(), step)]
    total = torch.stack(parts).sum(dim=0).tolist()
    return [int(c) for c in total[:bins]], int(total[below]), int(total[above])


def _histogram(values: torch.Tensor) -> Histogram:
    import torch

    v = values.float().reshape(-1)
    extremes = torch.aminmax(v)
    vmin, vmax = float(extremes.min), float(extremes.max)
    lo, hi = _central_range(v, vmin, vmax)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    counts, below, above = _bin_counts(v, lo, hi)
    step = (hi - lo) / HISTOGRAM_BINS
    return Histogram(
        edges=[lo + i * step for i in range(HISTOGRAM_BINS + 1)],
        counts=counts,
        below=below,
        above=above,
        min=vmin,
        max=vmax,
    )


def _two_level_scale(fields: Mapping[str, torch.Tensor], b: int) -> str | None:
    """Block ``b``'s stored scale as d × integer for the k-quants (block b of the first
    row lies in super-block b // sub-blocks-per-super-block); None for other formats."""
    if "sub_scale_u6" in fields:  # q4_k: 8 sub-blocks, a 6-bit scale and min each
        ls, lm = fields["sub_scale_u6"], fields["sub_min_u6"]
        sup, j = divmod(b, ls.shape[1])
        d, dmin = float(fields["scale_fp16"][sup]), float(fields["min_fp16"][sup])
        return f"d {d:.5g} × {int(ls[sup, j])}, dmin {dmin:.5g} × {int(lm[sup, j])}"
    if "sub_scale_i8" in fields:  # q6_k: 16 sub-blocks, an int8 scale each
        sc = fields["sub_scale_i8"]
        sup, j = divmod(b, sc.shape[1])
        return f"d {float(fields['scale_fp16'][sup]):.5g} × {int(sc[sup, j])}"
    return None


def run(params: BlockQuantizeParams, ctx: Context) -> BlockQuantizeResult:
    return quantize_blocks(params, ctx.device, ctx.progress)


def _error_metrics(x: torch.Tensor, q: QuantizedTensor, deq: torch.Tensor) -> ErrorSummary:
    from labs.quant.metrics import error_report

    return ErrorSummary.of(error_report(x, q, deq), input_is_zero=not bool(x.any()))


def _first_blocks(
    x: torch.Tensor, deq: torch.Tensor, q: QuantizedTensor, flat: bool
) -> list[BlockView]:
    """The first SHOWN_BLOCKS blocks of the first row: scales, values, codes, dequantized."""
    layout = q.layout
    xb, db = _blocks(x, layout, flat), _blocks(deq, layout, flat)
    valid = _valid(layout, flat, x.device)
    scale, offset = q.scale_offset()
    stored = q.scales.reshape(-1)
    per_row = max(1, layout.padded_row_len // layout.block_len) if not flat else layout.n_blocks
    shown = []
    for b in range(min(SHOWN_BLOCKS, per_row)):
        keep = valid[b][:SHOWN_ELEMENTS_PER_BLOCK]
        whole = xb[b][valid[b]]
        s_idx = (
            b if stored.numel() == layout.n_blocks else (0 if stored.numel() == 1 else b // per_row)
        )
        shown.append(
            BlockView(
                index=b,
                scale=float(stored[s_idx]),
                effective_scale=float(scale.reshape(-1)[b]),
                offset=None if offset is None else float(offset.reshape(-1)[b]),
                stored=_two_level_scale(q.fields, b),
                size=int(whole.numel()),
                absmax=float(whole.abs().max()) if whole.numel() else 0.0,
                values=[float(v) for v in xb[b][:SHOWN_ELEMENTS_PER_BLOCK][keep].tolist()],
                codes=[int(c) for c in q.qdata[b][:SHOWN_ELEMENTS_PER_BLOCK][keep].tolist()],
                dequantized=[float(v) for v in db[b][:SHOWN_ELEMENTS_PER_BLOCK][keep].tolist()],
            )
        )
    return shown


def _no_progress(fraction: float, message: str = "") -> None:
    pass


def quantize_blocks(
    params: BlockQuantizeParams,
    device: str,
    progress: Callable[[float, str], None] = _no_progress,
) -> BlockQuantizeResult:
    """Quantize the tensor; its bytes, its error, its first blocks and two histograms.
    ``progress`` hears of each step as it starts."""
    from labs.quant import FORMATS, quantize

    fmt = FORMATS[params.format]
    rows, cols = params.dims
    progress(0.05, "making the tensor")
    x = _tensor(params, device)
    progress(0.25, f"quantizing to {params.format}")
    q = quantize(x, params.format)
    deq = q.dequantize()
    layout = q.layout
    bits = BITS_PER_BYTE * q.nbytes / layout.numel
    progress(0.6, "measuring the error")
    metrics = _error_metrics(x, q, deq)
    progress(0.8, "the first blocks and the histograms")
    return BlockQuantizeResult(
        format=params.format,
        element=fmt.element,
        scale_type=fmt.stored_scale,
        shape=[rows, cols],
        numel=layout.numel,
        device=str(x.device),
        block_size=fmt.block_size,
        n_blocks=layout.n_blocks,
        nbytes=q.nbytes,
        bits_per_value=bits,
        nominal_bits_per_value=fmt.bits_per_value,
        compression_vs_fp32=FP32_BITS / bits,
        compression_vs_bf16=BF16_BITS / bits,
        metrics=metrics,
        first_blocks=_first_blocks(x, deq, q, fmt.layout_kind == "flat"),
        histograms={
            "values": _histogram(x.reshape(-1)),
            "errors": _histogram((deq - x).reshape(-1)),
        },
    )
