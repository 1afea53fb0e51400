"""vram-observe's run: the device, the batches, the out-of-memory search (with the
tools of ``probe``). Torch is imported inside the functions."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Literal

from labs.base import Context
from labs.catalog import memory
from labs.hardware.host_memory import reset_peak_rss, rss_bytes, trim_heap
from labs.vram_observe.model import (
    CPU_WARMUP_SIZE,
    MIB,
    OOM_SEARCH_BUDGET_S,
    DtypeSummary,
    GapItem,
    Measurement,
    Params,
    Result,
)
from labs.vram_observe.probe import (
    Nvml,
    Probe,
    fit_line,
    make_model,
    oom_row,
    search_oom,
    weight_shapes,
    weights_estimate,
)

# --- the lab -----------------------------------------------------------------

# RSS moves in pages and heap arenas: a later batch's activation peak may sit this
# much below an earlier one's and still count as growing.
CPU_RSS_NOISE_BYTES = 2 * MIB


@dataclass
class Device:
    """Where the lab measures, and under what cap."""

    kind: Literal["cuda", "cpu"]
    name: str
    measured: str
    cap: int  # bytes the OOM search may use (CUDA), or the budget the CPU projection uses
    nvml: Nvml | None = None
    restore_fraction: float | None = None


def open_device(params: Params, ctx: Context, notes: list[str]) -> Device:
    """The device to measure; on CUDA, tighten (never loosen) the per-process memory cap."""
    import torch

    if not (ctx.device == "cuda" and torch.cuda.is_available()):
        notes.append(
            "Ran on the CPU: every figure is this process's RSS (host memory) from "
            "/proc/self/status, not GPU memory. No OOM search on a CPU — the kernel kills a "
            "process rather than raise an error — so the projected batch comes from the slope."
        )
        if not reset_peak_rss():
            notes.append(
                "This kernel does not allow resetting the peak RSS: peaks are since process start."
            )
        # Start the thread pool and the matmul library before measuring anything, so their
        # one-time allocations do not land in the first dtype's weights.
        warm = torch.ones(CPU_WARMUP_SIZE, CPU_WARMUP_SIZE)
        torch.mm(warm, warm)
        return Device(
            kind="cpu",
            name="CPU",
            measured="host memory: this process's resident set size (RSS), not VRAM; no GPU "
            "was used",
            cap=params.memory_cap_mb * MIB,
        )
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    name = f"{props.name} (sm_{props.major}{props.minor})"
    uuid = str(props.uuid)
    try:
        fraction = float(torch.cuda.get_per_process_memory_fraction(idx))
    except (AttributeError, RuntimeError):  # older torch: no getter, the default is 1.0
        fraction = 1.0
    runtime_cap = int(fraction * props.total_memory)
    cap = min(params.memory_cap_mb * MIB, runtime_cap)
    restore = None
    if cap < runtime_cap:
        torch.cuda.set_per_process_memory_fraction(cap / props.total_memory, idx)
        restore = fraction
    notes.append(
        f"OOM search capped at {cap / MIB:.0f} MiB of the card's "
        f"{props.total_memory / MIB:.0f} MiB "
        f"(memory_cap_mb {params.memory_cap_mb}; this run's own limit {runtime_cap / MIB:.0f} MiB)."
    )
    return Device(
        kind="cuda",
        name=name,
        measured=f"VRAM on {name}: torch.cuda allocator counters (allocated, reserved, peak) and "
        "the driver's view (cudaMemGetInfo)",
        cap=cap,
        nvml=Nvml(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"),
        restore_fraction=restore,
    )


def run(params: Params, ctx: Context) -> Result:
    import torch

    notes: list[str] = []
    dev = open_device(params, ctx, notes)
    ctx.log(f"Measuring on {dev.name}: {dev.measured}.")
    started = time.monotonic()
    try:
        rows: list[Measurement] = []
        summaries: list[DtypeSummary] = []
        for n, dtype in enumerate(params.dtypes):
            deadline = started + OOM_SEARCH_BUDGET_S * (n + 1) / len(params.dtypes)
            summary, dtype_rows = measure_dtype(params, ctx, dev, dtype, n, deadline)
            summaries.append(summary)
            rows += dtype_rows
    finally:
        if dev.restore_fraction is not None:
            torch.cuda.set_per_process_memory_fraction(dev.restore_fraction)
    return _result(params, dev, rows, summaries, notes)


def measure_dtype(
    params: Params, ctx: Context, dev: Device, dtype: str, n: int, deadline: float
) -> tuple[DtypeSummary, list[Measurement]]:
    """Build the weights in ``dtype``, measure every requested batch, then (CUDA) search
    for the OOM point."""
    import torch

    cuda = dev.kind == "cuda"
    steps = len(params.dtypes)
    ctx.progress(0.05 + 0.8 * n / steps, f"{dtype}: building the weights")
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]

    def held() -> int:
        return torch.cuda.memory_allocated() if cuda else (rss_bytes() or 0)

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    else:
        trim_heap()
    before = held()
    weights, fwd = make_model(params, torch_dtype, dev.kind)
    if not cuda:
        trim_heap()
    weights_measured = held() - before
    probe = Probe(params, dev.kind, fwd, torch_dtype, dtype, dev.nvml)
    # Warm-up at batch 1: the first matmul creates the cuBLAS handle and its workspace.
    warm, oom_message = probe.try_measure(1)
    workspace = max(0, held() - before - weights_measured) if cuda and warm is not None else None

    rows: list[Measurement] = []
    largest_ok: int | None = None
    first_oom: int | None = None
    for b in params.batch_sizes:
        m, msg = probe.try_measure(b)
        if m is None:
            first_oom, oom_message = b, msg
            rows.append(oom_row(dtype, b))
            break
        largest_ok = b
        rows.append(m)
    how = "not searched on a CPU"
    if cuda and params.find_oom:
        ctx.progress(0.05 + 0.8 * (n + 0.5) / steps, f"{dtype}: searching for the OOM point")
        search = search_oom(probe, largest_ok, first_oom, params.max_batch, deadline)
        rows += search.rows
        largest_ok, first_oom, how = search.largest_fit, search.first_oom, search.how
        oom_message = search.message or oom_message
    elif cuda:
        how = f"OOM at batch {first_oom}" if first_oom else "not searched (find_oom is off)"
    if cuda and largest_ok:
        # Utilization means something only for a batch that keeps the GPU busy: the largest
        # that fits, run for the sampling window, replaces that batch's row.
        timed, _ = probe.try_measure(largest_ok, timed=True)
        if timed is not None:
            rows = [r for r in rows if r.batch != largest_ok] + [timed]
    rows.sort(key=lambda r: r.batch)

    fit = fit_line([(r.batch, r.peak_bytes) for r in rows if r.ok])
    measured = cuda or rss_grows_with_batch(rows)
    slope = fit[1] if fit and fit[1] > 0 and measured else None
    projected = max(0, int((dev.cap - fit[0]) / fit[1])) if fit and slope else None
    del weights, fwd, probe
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return (
        DtypeSummary(
            dtype=dtype,
            weights_estimate_bytes=weights_estimate(params, dtype),
            weights_measured_bytes=weights_measured,
            workspace_bytes=workspace,
            activation_bytes_per_sequence=slope,
            projected_max_batch=projected,
            largest_fit_batch=largest_ok if cuda else None,
            first_oom_batch=first_oom,
            oom_message=oom_message,
            oom_search=how,
            activations_measured=measured,
        ),
        rows,
    )


def rss_grows_with_batch(rows: list[Measurement]) -> bool:
    """Whether host-RSS activation peaks rise with the batch, as activations must. On a
    CPU they often do not (a freed forward's pages stay in the heap and the next, larger
    batch reuses them), and a number that falls as the batch grows would mislead."""
    ok = sorted((r for r in rows if r.ok), key=lambda r: r.batch)
    peaks = [r.activation_peak_bytes for r in ok]
    return (
        len(peaks) >= 2
        and peaks[-1] > peaks[0]
        and all(b >= a - CPU_RSS_NOISE_BYTES for a, b in zip(peaks, peaks[1:], strict=False))
    )


def cpu_finding(summaries: list[DtypeSummary]) -> str:
    """What a CPU run can and cannot measure, said before any number."""
    unmeasured = [s.dtype for s in summaries if not s.activations_measured]
    acts = (
        f" Activations could not be measured for {', '.join(unmeasured)}: the process's RSS "
        "peaks did not grow with the batch (the heap reuses memory freed by the previous "
        "forward), so no per-sequence figure is shown for them."
        if unmeasured
        else " Activations are RSS peaks, coarse to a few MiB."
    )
    if len(summaries) > 1:
        acts += (
            " CPU kernels may compute half-precision dtypes through fp32 temporaries, so "
            "their activations need not be half of fp32's as they would be on a GPU."
        )
    return (
        "This run used the CPU, so it measures host memory (this process's RSS), not GPU "
        "memory. It can show the weights' bytes per dtype and the speed; it cannot show VRAM, "
        "the CUDA allocator's cache, the CUDA context or an out-of-memory point. Run it on a "
        "GPU worker for those." + acts
    )


def _result(
    params: Params,
    dev: Device,
    rows: list[Measurement],
    summaries: list[DtypeSummary],
    notes: list[str],
) -> Result:
    first = summaries[0]
    gap, context = memory_gap(params, first, rows)
    act = first.activation_bytes_per_sequence
    return Result(
        device=dev.kind,
        device_name=dev.name,
        measured=dev.measured,
        workload=params.workload,
        param_count=sum(r * c for r, c in weight_shapes(params)),
        memory_cap_bytes=dev.cap,
        measurements=rows,
        summaries=summaries,
        gap=gap,
        weights_mib=first.weights_measured_bytes / MIB,
        activation_mib_per_sequence=None if act is None else act / MIB,
        largest_batch=first.largest_fit_batch,
        cuda_context_mib=None if context is None else context / MIB,
        notes=notes,
        finding=None if dev.kind == "cuda" else cpu_finding(summaries),
    )


def memory_gap(
    params: Params, s: DtypeSummary, rows: list[Measurement]
) -> tuple[list[GapItem], int | None]:
    """Where the device's memory went at the largest batch that ran, against memory-budget's
    estimate (weights + a fixed runtime allowance); and the CUDA context's share, bytes."""
    ok = [r for r in rows if r.ok and r.dtype == s.dtype and r.device_used_bytes is not None]
    if not ok:
        return [], None
    last = max(ok, key=lambda r: r.batch)
    reserved = last.reserved_bytes or 0
    context = max(0, (last.device_used_bytes or 0) - reserved)
    held = s.weights_measured_bytes + (s.workspace_bytes or 0)
    allowance = round(memory.DEFAULT_RUNTIME_OVERHEAD_GB * memory.BYTES_PER_GB)
    return [
        GapItem(
            item="weights (estimate = parameters × bytes)",
            bytes=s.weights_estimate_bytes,
            note=f"measured {s.weights_measured_bytes} bytes",
        ),
        GapItem(
            item="cuBLAS workspace and other first-call allocations",
            bytes=s.workspace_bytes,
            note="kept by the caching allocator after the first matmul",
        ),
        GapItem(
            item=f"activations at batch {last.batch} (peak − held)",
            bytes=last.activation_peak_bytes,
            note="freed after the forward; memory-budget has no per-sequence term for them",
        ),
        GapItem(
            item="allocator cache (reserved − allocated)",
            bytes=max(0, reserved - held),
            note="freed blocks the caching allocator keeps for reuse; nvidia-smi counts them "
            "as used",
        ),
        GapItem(
            item="CUDA context and libraries (device used − reserved)",
            bytes=context,
            note="outside PyTorch's allocator: module images, cuBLAS/cuDNN handles; includes "
            "other processes if any share this GPU",
        ),
        GapItem(
            item="memory-budget's runtime allowance",
            bytes=allowance,
            note=f"its fixed {memory.DEFAULT_RUNTIME_OVERHEAD_GB:g} GB stands for everything above "
            "except the weights",
        ),
    ], context
