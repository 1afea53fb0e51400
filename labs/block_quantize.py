"""Lab ``block-quantize``: quantize a tensor to one format and look inside.

The tensor is drawn from a distribution (normal, uniform, Laplace, normal with
injected outliers) or is the learner's own values — for instance the 16 values
of one NVFP4 block. The lab shows the codes and scales of the first blocks, the
stored bytes and bits per value, the error split into rounding error (values
inside the block's representable range) and clipping error (values beyond it),
and histograms of the values and of the errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, FiniteFloat, ValidationInfo, field_validator, model_validator

from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU
from labs.presenters import concepts
from labs.quant.metrics import ErrorSummary
from labs.quant.spec import FormatKey
from labs.viz.tiles import Tile, readable, tile

if TYPE_CHECKING:
    import torch

    from labs.quant import QuantizedTensor

# The labs.quant format keys, from its torch-free table (validating a request imports no torch).
FORMAT_KEYS: tuple[str, ...] = tuple(key.value for key in FormatKey)
Distribution = Literal["normal", "uniform", "laplace", "outliers", "custom"]

MAX_DIM = 4096  # rows and cols each; 4096 × 4096 float32 = 64 MiB
DEFAULT_SHAPE = (256, 256)
MAX_CUSTOM_VALUES = 65_536
MAX_SEED = 2**31 - 1
# Outliers: this fraction of the values is multiplied by OUTLIER_SCALE (LLM
# activations have a few channels ~20-100× the rest).
OUTLIER_FRACTION = 0.001
OUTLIER_SCALE = 50.0
# How much of the quantized tensor the result shows element by element.
SHOWN_BLOCKS = 4
SHOWN_ELEMENTS_PER_BLOCK = 32
HISTOGRAM_BINS = 40
# Outliers in a histogram: when the full range is over OUTLIER_RANGE_RATIO times the
# central (1 - 2·CENTRAL_TAIL) range, only that range (plus a margin) is binned and
# the values beyond it are counted apart. Percentiles come from a strided sample.
CENTRAL_TAIL = 0.001
OUTLIER_RANGE_RATIO = 3.0
CENTRAL_MARGIN = 0.1
HISTOGRAM_SAMPLE = 1 << 16
BITS_PER_BYTE = 8
FP32_BITS = 32
BF16_BITS = 16


class BlockQuantizeParams(LabParams):
    format: FormatKey = Field(
        default=FormatKey.NVFP4, title="Format", description="The labs.quant format to quantize to"
    )
    shape: list[int] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description=f"[rows, cols], each 1 to {MAX_DIM}; blocks run along cols. "
        f"Empty: {DEFAULT_SHAPE[0]}, {DEFAULT_SHAPE[1]}, or 1, len(values) with custom values",
    )
    distribution: Distribution = Field(
        default="normal",
        description="normal, uniform (-1..1), laplace (heavy-tailed), outliers (normal with "
        f"{OUTLIER_FRACTION:.1%} of values ×{OUTLIER_SCALE:g}) or custom (your values)",
    )
    values: list[FiniteFloat] | None = Field(
        default=None,
        max_length=MAX_CUSTOM_VALUES,
        description="With distribution custom: the tensor's values in row-major order, e.g. the 16 values of one NVFP4 block",
        validate_default=True,
    )
    seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="Random seed for the generated distributions"
    )

    @model_validator(mode="before")
    @classmethod
    def _default_shape(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("shape") is None:
            values = data.get("values")
            if (
                data.get("distribution") == "custom"
                and isinstance(values, list)
                and 0 < len(values) <= MAX_DIM
            ):
                data = {**data, "shape": [1, len(values)]}
            elif data.get("distribution") != "custom":
                data = {**data, "shape": list(DEFAULT_SHAPE)}
        return data

    @field_validator("shape")
    @classmethod
    def _dims(cls, shape: list[int] | None) -> list[int] | None:
        if shape is not None:
            for name, n in zip(("rows", "cols"), shape, strict=True):
                if not 1 <= n <= MAX_DIM:
                    raise ValueError(f"{name} must be between 1 and {MAX_DIM}, not {n}")
        return shape

    @field_validator("values")
    @classmethod
    def _values(cls, values: list[float] | None, info: ValidationInfo) -> list[float] | None:
        dist = info.data.get("distribution")
        if dist != "custom":
            if values is not None:
                raise ValueError("values are used only with distribution custom")
            return None
        if not values:
            raise ValueError("distribution custom needs values, e.g. [0.1, -2.5, 3.0, …]")
        shape = info.data.get("shape")
        if shape is None and "shape" not in info.data:
            return values  # the shape itself is invalid; its own error says why
        if shape is None:
            raise ValueError(
                f"{len(values)} values need a shape [rows, cols] (more than {MAX_DIM} in one row)"
            )
        if shape[0] * shape[1] != len(values):
            raise ValueError(
                f"shape {shape} holds {shape[0] * shape[1]} values but {len(values)} were given"
            )
        return values

    @property
    def dims(self) -> tuple[int, int]:
        assert self.shape is not None
        return self.shape[0], self.shape[1]


class BlockView(BaseModel):
    index: int
    scale: float = Field(
        description="Decoded stored scale of the block (NVFP4: the E4M3 block scale)"
    )
    effective_scale: float = Field(
        description="What one step of the element grid is worth in this block"
    )
    offset: float | None = None
    stored: str | None = Field(
        default=None,
        description="How a two-level scale is stored (k-quants: the super-block's fp16 d "
        "times the sub-block's integer scale, and the same for the minimum)",
    )
    size: int | None = Field(
        default=None, description="Values in the whole block (values shows the first ones)"
    )
    absmax: float | None = Field(default=None, description="Largest |value| in the whole block")
    values: list[float]
    codes: list[int]
    dequantized: list[float]


class Histogram(BaseModel):
    """Counts over ``edges``; where a few far values would squash the rest into two
    bars, the edges span the central values and ``below``/``above`` count the rest."""

    edges: list[float]
    counts: list[int]
    below: int = Field(default=0, description="Values left of the first edge")
    above: int = Field(default=0, description="Values right of the last edge")
    min: float | None = Field(default=None, description="The smallest value, shown or not")
    max: float | None = Field(default=None, description="The largest value, shown or not")


class BlockQuantizeResult(LabResult):
    format: str
    element: str
    scale_type: str
    shape: list[int]
    numel: int
    device: str
    block_size: int | None
    n_blocks: int
    nbytes: int = Field(
        description="Every stored byte: payload, scales, zero points, tensor scales"
    )
    bits_per_value: float = Field(description="8 · nbytes / numel for this tensor")
    nominal_bits_per_value: float = Field(
        description="The format's bits per value, scales included"
    )
    compression_vs_fp32: float
    compression_vs_bf16: float
    metrics: ErrorSummary
    first_blocks: list[BlockView]
    histograms: dict[str, Histogram]


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
    from labs.presenters.block_quantize import present

    result = quantize_blocks(params, ctx.device)
    present(result, params, ctx)
    return result


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


def quantize_blocks(params: BlockQuantizeParams, device: str) -> BlockQuantizeResult:
    """Quantize the tensor; its bytes, its error, its first blocks and two histograms."""
    from labs.quant import FORMATS, quantize

    fmt = FORMATS[params.format]
    rows, cols = params.dims
    x = _tensor(params, device)
    q = quantize(x, params.format)
    deq = q.dequantize()
    layout = q.layout
    bits = BITS_PER_BYTE * q.nbytes / layout.numel
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
        metrics=_error_metrics(x, q, deq),
        first_blocks=_first_blocks(x, deq, q, fmt.layout_kind == "flat"),
        histograms={
            "values": _histogram(x.reshape(-1)),
            "errors": _histogram((deq - x).reshape(-1)),
        },
    )


def headline(r: Mapping[str, Any]) -> list[Tile]:
    """Bits per value, stored bytes, SQNR, rounding vs clipping MSE and % clipped."""
    m = r["metrics"]
    share = m["clipping_mse"] / m["mse"] if m["mse"] > 0 else 0.0
    return [
        tile(
            "Bits per value",
            r["bits_per_value"],
            "bits",
            key="bits_per_value",
            means=f"scales included; {r['compression_vs_bf16']:.1f}× smaller than bf16 (16 bits)",
        ),
        tile(
            "Stored bytes",
            r["nbytes"],
            "bytes",
            key="nbytes",
            means=f"payload and scales of {r['numel']:,} values",
        ),
        tile(
            "SQNR",
            m["sqnr_db"],
            "dB",
            key="metrics.sqnr_db",
            means="signal over error power; each extra bit buys about 6 dB",
        ),
        Tile(
            label="Rounding vs clipping MSE",
            text=f"{readable(m['rounding_mse'])} vs {readable(m['clipping_mse'])}",
            exact=f"rounding {m['rounding_mse']!r}, clipping {m['clipping_mse']!r}",
            means=f"{share:.0%} of the squared error comes from clipping",
            key="metrics.rounding_mse",
        ),
        tile(
            "Values clipped",
            m["clipped_fraction"] * 100,
            "%",
            key="metrics.clipped_fraction",
            means=f"{m['clipped']:,} values beyond their block's range",
            tone="warn" if m["clipped"] else "",
        ),
    ]


LAB = Lab(
    id="block-quantize",
    title="Block-quantize a tensor",
    summary="Quantize a tensor (normal, uniform, heavy-tailed, with outliers, or your own values) to int8/int4, FP8, MX, NVFP4, NF4 or GGUF formats; see the codes and scales of the first blocks, bits per value, and the error split into rounding and clipping.",
    needs_gpu=NeedsGPU.preferred,
    params=BlockQuantizeParams,
    run=run,
    time_limit_s=120.0,
    memory_limit_mb=2048,
    numeric_outputs=(("bits_per_value", "bits"), ("nbytes", "bytes")),
    headline=headline,
    concept=concepts.block_quantize,
)
