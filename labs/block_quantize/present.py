"""block-quantize's page: block 0 on the format's grid (the lead figure), the tables
of the first blocks, the metrics, the rounding/clipping split and the two histograms,
each figure with its data for the page's table alternative; and the headline tiles."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from labs.base import Context
from labs.block_quantize.model import BlockQuantizeParams, BlockQuantizeResult, BlockView, Histogram
from labs.viz.tiles import Tile, readable, tile

# A grid value and a dequantized value this close (relative) are the same point.
GRID_MATCH_RTOL = 1e-4


def present(r: BlockQuantizeResult, params: BlockQuantizeParams, ctx: Context) -> None:
    """Block 0 value by value, the first blocks' scales, the metrics and the figures."""
    rows, cols = r.shape
    ctx.log(
        f"x: {params.distribution} {rows}×{cols} float32 on {r.device} (seed {params.seed}); "
        f"format {params.format}"
    )
    _grid_figure(r, ctx)
    _tables(r, ctx)
    m = r.metrics
    ctx.metric("bits_per_value", r.bits_per_value, "bits", "bits per value (scales included)")
    ctx.metric("nbytes", float(r.nbytes), "bytes", "stored bytes")
    if m.sqnr_db is not None:
        ctx.metric("sqnr_db", m.sqnr_db, "dB", "SQNR")
    ctx.metric("rmse", m.rmse, "", "RMS error")
    ctx.metric("clipped_fraction", m.clipped_fraction * 100, "%", "values clipped")
    _split_figure(r, ctx)
    for name, label, what in (
        ("values", "value", "Your tensor's values"),
        ("errors", "dequantized − value", "Error of each value after quantizing"),
    ):
        _histogram_figure(name, r.histograms[name], f"{what} ({r.format})", label, ctx)


def _tables(r: BlockQuantizeResult, ctx: Context) -> None:
    first = r.first_blocks[0]
    ctx.table(
        block_title(first),
        ["i", "value", "code", "dequantized", "error"],
        [
            [i, v, c, d, d - v]
            for i, (v, c, d) in enumerate(
                zip(first.values, first.codes, first.dequantized, strict=True)
            )
        ],
    )
    ctx.table(
        "first blocks",
        ["block", "stored scale", "effective scale", "absmax", "max |error|"],
        [
            [
                bv.index,
                bv.stored or bv.scale,
                bv.effective_scale,
                bv.absmax if bv.absmax is not None else max(abs(v) for v in bv.values),
                max(abs(d - v) for v, d in zip(bv.values, bv.dequantized, strict=True)),
            ]
            for bv in r.first_blocks
        ],
    )


def block_title(block: BlockView) -> str:
    """'block 0: 128 values (the first 32 shown), scale 0.487, absmax 3.41': the whole
    block's size and absmax, not those of the values the table has room for."""
    size = block.size if block.size is not None else len(block.values)
    absmax = block.absmax if block.absmax is not None else max(map(abs, block.values), default=0)
    shown = f" (the first {len(block.values)} shown)" if len(block.values) < size else ""
    return (
        f"block {block.index}: {size} values{shown}, scale {readable(block.scale)}, "
        f"absmax {readable(absmax)}"
    )


def element_levels(element: str) -> list[float] | None:
    """Every finite value of a small-float element type (E2M1, E4M3, …), both signs;
    None for integer and table elements."""
    from labs.quant import minifloat

    fmt = getattr(minifloat, element.upper(), None)
    if not isinstance(fmt, minifloat.MiniFloat):
        return None
    positive = fmt.positive_values()
    return sorted({-v for v in positive} | set(positive))


def block_grid(r: BlockQuantizeResult, block: BlockView) -> list[float] | None:
    """The values block ``block`` can store (element grid × effective scale), or None
    when the format is not a scaled small float or its points miss the grid."""
    levels = element_levels(r.element)
    if levels is None or block.offset not in (None, 0.0) or block.effective_scale <= 0:
        return None
    grid = [v * block.effective_scale for v in levels]
    for d in block.dequantized:
        if not any(math.isclose(d, g, rel_tol=GRID_MATCH_RTOL, abs_tol=1e-30) for g in grid):
            return None
    return grid


def _grid_figure(r: BlockQuantizeResult, ctx: Context) -> None:
    from labs.viz import charts

    block = r.first_blocks[0]
    grid = block_grid(r, block)
    if grid is None:
        return
    top = max(max(abs(v) for v in block.values), max(abs(g) for g in grid))
    zeros = sum(1 for v, d in zip(block.values, block.dequantized, strict=True) if d == 0 and v)
    absmax = block.absmax if block.absmax is not None else max(map(abs, block.values))
    why = (
        f" The largest |value| of the block ({absmax:.4g}) sets the scale, so {zeros} of "
        f"{len(block.values)} values are stored as 0."
        if zeros * 2 >= len(block.values)
        else ""
    )
    title = f"Block 0 on the {r.element} grid: each value moves to a stored one"
    ctx.plot(
        title,
        charts.value_grid(
            grid,
            block.values,
            block.dequantized,
            title=f"Block 0 of {r.format}: {len(block.values)} values on the {r.element} grid",
            x_label=f"value (grid step × scale {block.effective_scale:.4g})",
        ),
        {
            "lead": True,
            "caption": f"Thin lines: the {len(grid)} values an {r.element} element can hold, "
            f"times this block's scale ({block.effective_scale:.6g}); the widest reaches "
            f"±{top:.4g}. Each value is joined to the value it is stored as.{why}",
            "table": _table(
                ["value", "stored as", "error"],
                [[v, d, d - v] for v, d in zip(block.values, block.dequantized, strict=True)],
            ),
        },
        id="grid",
    )


def _split_figure(r: BlockQuantizeResult, ctx: Context) -> None:
    from labs.viz import charts

    m = r.metrics
    share = m.clipping_mse / m.mse if m.mse > 0 else 0.0
    ctx.plot(
        "Where the error comes from: rounding vs clipping",
        charts.error_split_bars(
            [r.format], [m.rounding_mse], [m.clipping_mse], title="Rounding vs clipping error"
        ),
        {
            "lead": not r.first_blocks or block_grid(r, r.first_blocks[0]) is None,
            "caption": f"{m.clipped_fraction:.2%} of the values were clipped; they cause "
            f"{share:.0%} of the mean squared error.",
            **charts.error_split_data(
                "Rounding vs clipping error", [r.format], [m.rounding_mse], [m.clipping_mse]
            ),
            "table": _table(
                ["part", "MSE", "share of MSE"],
                [
                    [charts.ROUNDING, m.rounding_mse, 1 - share],
                    [charts.CLIPPING, m.clipping_mse, share],
                ],
            ),
        },
        id="error-split",
    )


def outlier_note(h: Histogram) -> str:
    """'12 values beyond the range shown (−171 … 168)', or '' when every value is shown."""
    beyond = h.below + h.above
    if not beyond:
        return ""
    word = "value" if beyond == 1 else "values"
    return f"{beyond:,} {word} beyond the range shown ({h.min:.4g} … {h.max:.4g})"


def _histogram_figure(figure_id: str, h: Histogram, title: str, x_label: str, ctx: Context) -> None:
    from labs.viz import charts

    note = outlier_note(h)
    log = charts.needs_log_counts(h.counts)
    ctx.plot(
        title,
        charts.binned_histogram(
            h.edges, h.counts, title=title, x_label=x_label, note=note, log_counts=log
        ),
        {
            "kind": "histogram",
            "x_label": x_label,
            **h.model_dump(),
            "caption": " ".join(
                part
                for part in (
                    note + "." if note else "",
                    "Counts on a log scale: the tails would be invisible otherwise." if log else "",
                )
                if part
            ),
        },
        id=figure_id,
    )


def _table(columns: list[str], rows: list[list[Any]]) -> dict[str, Any]:
    return {"columns": columns, "rows": rows}


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
