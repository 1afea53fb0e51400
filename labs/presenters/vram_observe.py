"""vram-observe's presenter: the result as tables, metrics, one figure and log lines."""

from __future__ import annotations

from typing import Any

from labs.base import Context
from labs.vram.models import MIB, DtypeSummary, Params, Result


def present(result: Result, params: Params, ctx: Context) -> None:
    """Emit the run's events from its result, in the order the run page shows them."""
    cuda = result.device == "cuda"
    ctx.progress(0.9, "reporting")
    columns, table = _measurement_rows(result)
    what = "VRAM" if cuda else "process RSS, not VRAM"
    ctx.table(f"Measurements on {result.device_name} ({what})", columns, table)
    ctx.table(
        "Per dtype: the same measurement after changing one option",
        [
            "dtype",
            "weights estimate (MiB)",
            "weights measured (MiB)",
            "activations per sequence (MiB)",
            "projected max batch",
            "largest batch that fit",
            "first OOM batch",
            "OOM search",
        ],  # fmt: skip
        [
            [
                s.dtype,
                _mib(s.weights_estimate_bytes),
                _mib(s.weights_measured_bytes),
                _mib(s.activation_bytes_per_sequence),
                s.projected_max_batch,
                s.largest_fit_batch,
                s.first_oom_batch,
                s.oom_search,
            ]  # fmt: skip
            for s in result.summaries
        ],
    )
    first = result.summaries[0]
    if result.gap:
        ctx.table(
            f"Where the memory went ({first.dtype}) vs memory-budget's estimate",
            ["item", "MiB", "note"],
            [[g.item, _mib(g.bytes), g.note] for g in result.gap],
        )
    _oom_logs(result.summaries, ctx)
    _metrics(result, ctx)
    if len(result.summaries) > 1:
        ctx.log(_change_text(result.summaries[0], result.summaries[1]))
    _plot(result, params, ctx)
    for note in result.notes:
        ctx.log(note)
    ctx.progress(1.0, "done")


def _measurement_rows(result: Result) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of the measurements table: allocator counters on CUDA, RSS on a CPU."""
    rows = result.measurements
    if result.device == "cuda":
        columns = [
            "dtype", "batch", "fits", "allocated (MiB)", "reserved (MiB)", "peak allocated (MiB)",
            "device used (MiB)", "activations (MiB)", "seconds", "tokens/s", "GPU util %",
        ]  # fmt: skip
        return columns, [
            [
                r.dtype,
                r.batch,
                r.ok,
                _mib(r.allocated_bytes),
                _mib(r.reserved_bytes),
                _mib(r.peak_allocated_bytes),
                _mib(r.device_used_bytes),
                _mib(r.activation_peak_bytes),
                round(r.seconds, 4),
                round(r.tokens_per_s),
                r.utilization_pct,
            ]  # fmt: skip
            for r in rows
        ]
    columns = [
        "dtype", "batch", "RSS before (MiB)", "RSS peak (MiB)", "activations (MiB)",
        "seconds", "tokens/s", "CPU cores busy ×100",
    ]  # fmt: skip
    trusted = {s.dtype for s in result.summaries if s.activations_measured}
    return columns, [
        [
            r.dtype,
            r.batch,
            _mib(r.rss_before_bytes),
            _mib(r.rss_peak_bytes),
            _mib(r.activation_peak_bytes) if r.dtype in trusted else "not measurable on a CPU",
            round(r.seconds, 4),
            round(r.tokens_per_s),
            None if r.utilization_pct is None else round(r.utilization_pct),
        ]  # fmt: skip
        for r in rows
    ]


def _oom_logs(summaries: list[DtypeSummary], ctx: Context) -> None:
    for s in summaries:
        if s.oom_message:
            ctx.log(f"{s.dtype}: {s.oom_search}. torch said: {s.oom_message}")
        if s.projected_max_batch and s.largest_fit_batch and s.first_oom_batch:
            ctx.log(
                f"{s.dtype}: the straight line through the peaks predicts {s.projected_max_batch} "
                f"sequences under the cap; {s.largest_fit_batch} fit. The rest is the allocator: "
                "it rounds blocks up, keeps freed ones cached, and needs each new block in one "
                "piece within the cap."
            )


def _metrics(result: Result, ctx: Context) -> None:
    first = result.summaries[0]
    ctx.metric("weights_mib", result.weights_mib, "MiB", f"weights measured ({first.dtype})")
    if result.activation_mib_per_sequence is not None:
        ctx.metric(
            "activation_mib_per_sequence",
            result.activation_mib_per_sequence,
            "MiB",
            f"activations per sequence ({first.dtype})",
        )
    if result.largest_batch is not None:
        ctx.metric(
            "largest_batch",
            result.largest_batch,
            "sequences",
            f"largest batch that fit ({first.dtype})",
        )
    if result.cuda_context_mib is not None:
        ctx.metric("cuda_context_mib", result.cuda_context_mib, "MiB", "CUDA context and libraries")


def _plot(result: Result, params: Params, ctx: Context) -> None:
    from labs.viz import charts

    cuda = result.device == "cuda"
    cap_mib = result.memory_cap_bytes / MIB
    series = {
        s.dtype: (
            [r.batch for r in result.measurements if r.dtype == s.dtype and r.ok],
            [r.peak_bytes / MIB for r in result.measurements if r.dtype == s.dtype and r.ok],
        )
        for s in result.summaries
    }
    ctx.plot(
        f"Peak {'GPU memory (allocated)' if cuda else 'process RSS'} against batch",
        charts.line_chart(
            series,
            title=f"{params.workload}, {params.layers} × hidden {params.hidden_size}",
            x_label="batch (sequences)",
            y_label="MiB (2^20 bytes)" if cuda else "MiB (2^20 bytes) of RSS",
            hlines={f"cap {cap_mib:.0f} MiB": cap_mib} if cuda else None,
            log_x=True,
        ),
        {
            "series": {k: {"batch": v[0], "mib": v[1]} for k, v in series.items()},
            "cap_mib": cap_mib,
        },
    )


def _change_text(a: DtypeSummary, b: DtypeSummary) -> str:
    text = (
        f"Changing {a.dtype} → {b.dtype}: weights {_mib(a.weights_measured_bytes)} → "
        f"{_mib(b.weights_measured_bytes)} MiB"
    )
    if a.activation_bytes_per_sequence and b.activation_bytes_per_sequence:
        text += (
            f", activations per sequence {_mib(a.activation_bytes_per_sequence)} → "
            f"{_mib(b.activation_bytes_per_sequence)} MiB"
        )
    if a.largest_fit_batch and b.largest_fit_batch:
        text += f", largest batch that fit {a.largest_fit_batch} → {b.largest_fit_batch}"
    return text + "."


def _mib(n: float | None) -> float | None:
    return None if n is None else round(n / MIB, 2)
