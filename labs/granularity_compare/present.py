"""granularity-compare's page: ``present`` turns what ``run`` returned into events; the
headline tiles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from labs.base import Context
from labs.granularity_compare.compute import Comparison, outlier_count
from labs.granularity_compare.model import DB_PER_BIT, PERCENT, Params, Result
from labs.viz.tiles import Tile, readable, tile

if TYPE_CHECKING:
    pass


def present(comparison: Comparison, params: Params, ctx: Context) -> None:
    """Emit the run's events, in the order the run page shows them."""
    r = comparison.result
    rows, cols = r.shape
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
    _table(r, ctx)
    _metrics(r, ctx)
    _plots(comparison, ctx)


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
            **charts.error_split_data(
                f"{r.format}: rounding vs clipping error by granularity",
                [g.granularity for g in r.rows],
                [g.error.rounding_mse for g in r.rows],
                [g.error.clipping_mse for g in r.rows],
            ),
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
        id="error-split",
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
            id="abs-error",
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
        id="sqnr",
    )


def headline(r: Mapping[str, Any]) -> list[Tile]:
    """SQNR per tensor and per block 32, what the block's scales cost, the best choice
    per stored bit, and how much of the per-tensor error is clipping."""
    rows = {row["granularity"]: row for row in r["rows"]}
    tensor = rows["tensor"]["error"]
    share = tensor["clipping_mse"] / tensor["mse"] if tensor["mse"] > 0 else 0.0
    return [
        tile(
            "SQNR, one scale per tensor",
            r["sqnr_db_tensor"],
            "dB",
            key="sqnr_db_tensor",
            means="the largest |value| sets the step of every value",
        ),
        tile(
            "SQNR, one scale per 32 values",
            r["sqnr_db_block_32"],
            "dB",
            key="sqnr_db_block_32",
            means=f"+{readable(r['sqnr_gain_db_block_32'])} dB over per tensor",
        ),
        tile(
            "Bits per value, block 32",
            r["bits_per_value_block_32"],
            "bits",
            key="bits_per_value_block_32",
            means=f"scales cost {readable(r['scale_overhead_bytes_block_32'] / 1024)} KiB here",
        ),
        tile(
            "Best SQNR per stored bit",
            r["best_by_sqnr_per_bit"],
            key="best_by_sqnr_per_bit",
            means=f"best SQNR outright: {r['best_by_sqnr']}",
        ),
        tile(
            "Clipping share, per tensor",
            share * 100,
            "%",
            key="rows.0.error.clipping_mse",
            means=f"rounding MSE {readable(tensor['rounding_mse'])}, "
            f"clipping MSE {readable(tensor['clipping_mse'])}",
        ),
    ]
