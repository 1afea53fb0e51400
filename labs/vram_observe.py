"""Lab ``vram-observe``: watch real memory while a real workload runs.

A small transformer block stack (or a chain of matmuls) runs forward at
several batch sizes and in several dtypes. On a CUDA device the lab records
what ``torch.cuda`` says (allocated, reserved, peak), what the driver says
(``cudaMemGetInfo``; NVML utilization through pynvml or ``nvidia-smi``), and
then doubles the batch until the allocator raises ``OutOfMemoryError`` under a
cap — the out-of-memory point, narrowed by bisection. Then it compares with
the rule ``memory-budget`` uses (weights = parameters × bytes, plus a fixed
runtime allowance) and names the gap: CUDA context, allocator cache, cuBLAS
workspace, activations.

On a CPU there is no VRAM: the lab measures this process's resident memory
(RSS, from ``/proc/self/status``) and says so in its result. It does not look
for an out-of-memory point there (the kernel kills a process, it does not
raise), but it projects one from the measured slope.

Units: bytes; MiB = 2^20 bytes; GB = 1e9 bytes.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, field_validator

from labs import memory
from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU
from labs.hardware import nvidia_smi, nvml
from labs.hardware.host_memory import peak_rss_bytes, reset_peak_rss, rss_bytes, trim_heap

if TYPE_CHECKING:
    import torch

Workload = Literal["transformer-block", "matmul-chain"]
DType = Literal["fp32", "bf16", "fp16"]

MIB = 2**20
HEAD_DIM = 64  # attention heads = hidden_size / 64, as in Llama and GPT-2
MLP_RATIO = 4  # GPT-2-style MLP: hidden → 4·hidden → hidden
QKV_MATRICES = 3
MAX_HIDDEN = 8192
MAX_SEQ = 8192
MAX_LAYERS = 16
MAX_BATCH = 65536
MAX_BATCH_SIZES = 8
MAX_CAP_MB = 192 * 1024  # more than any single GPU in the registry
MIN_CAP_MB = 64
# The lab's time limit bounds everything; the OOM search stops early rather than be killed.
TIME_LIMIT_S = 120.0
OOM_SEARCH_BUDGET_S = 60.0
# After the doubling finds an OOM, bisect until the bracket is this fraction of its low end.
OOM_BISECT_RESOLUTION = 1 / 16
# Utilization is sampled after keeping the GPU busy this long (NVML averages over
# a window of 1/6 s to 1 s, depending on the GPU).
UTILIZATION_WINDOW_S = 0.5
MAX_TIMED_ITERATIONS = 200
CPU_WARMUP_SIZE = 256
MIN_SECONDS = 1e-9  # guards rates against a zero-length timing


class Params(LabParams):
    workload: Workload = Field(
        default="transformer-block",
        description="What runs forward: GPT-style transformer blocks (attention + MLP, "
        "12·hidden² weights each) or a chain of hidden×hidden matmuls with GELU.",
    )
    hidden_size: int = Field(
        default=512,
        ge=HEAD_DIM,
        le=MAX_HIDDEN,
        multiple_of=HEAD_DIM,
        description="Model width; a multiple of 64 (one attention head per 64).",
    )
    seq_len: int = Field(default=64, ge=1, le=MAX_SEQ, description="Tokens per sequence.")
    layers: int = Field(
        default=2, ge=1, le=MAX_LAYERS, description="Blocks (or matmuls) in the stack."
    )
    batch_sizes: list[int] = Field(
        default=[1, 2, 4, 8],
        min_length=1,
        max_length=MAX_BATCH_SIZES,
        description="Batch sizes (sequences) to measure, each 1 to max_batch.",
    )
    dtypes: list[DType] = Field(
        default=["fp32", "bf16"],
        min_length=1,
        max_length=3,
        description="Dtypes to repeat the same measurement in (fp32, bf16, fp16): change one "
        "option and compare.",
    )
    find_oom: bool = Field(
        default=True,
        description="On a GPU, keep doubling the batch until out of memory (up to max_batch), "
        "then bisect to the largest batch that fits.",
    )
    max_batch: int = Field(
        default=8192, ge=1, le=MAX_BATCH, description="Largest batch the OOM search may try."
    )
    memory_cap_mb: int = Field(
        default=2048,
        ge=MIN_CAP_MB,
        le=MAX_CAP_MB,
        description="GPU memory (MiB) the OOM search may use; the run's own limit still applies "
        "if it is lower.",
    )

    @field_validator("batch_sizes")
    @classmethod
    def _sorted_unique(cls, v: list[int]) -> list[int]:
        if any(b < 1 or b > MAX_BATCH for b in v):
            raise ValueError(f"every batch size must be between 1 and {MAX_BATCH}")
        return sorted(set(v))

    @field_validator("dtypes")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("each dtype at most once")
        return v


class Measurement(BaseModel):
    dtype: str
    batch: int
    ok: bool = Field(description="False when this batch ran out of memory")
    allocated_bytes: int | None = Field(
        description="CUDA: memory_allocated() with the output alive"
    )
    reserved_bytes: int | None = Field(description="CUDA: memory_reserved() after the forward")
    peak_allocated_bytes: int | None = Field(
        description="CUDA: max_memory_allocated() in the forward"
    )
    peak_reserved_bytes: int | None
    device_used_bytes: int | None = Field(description="CUDA: total − free from cudaMemGetInfo")
    rss_before_bytes: int | None = Field(description="CPU: resident set before the forward")
    rss_peak_bytes: int | None = Field(description="CPU: peak resident set during the forward")
    peak_bytes: int = Field(description="Peak of what this device measures (CUDA allocated or RSS)")
    activation_peak_bytes: int = Field(
        description="peak_bytes minus what was held before the forward"
    )
    seconds: float
    tokens_per_s: float
    utilization_pct: float | None = Field(
        description="NVML GPU utilization (CUDA) or CPU cores busy ×100"
    )


class DtypeSummary(BaseModel):
    dtype: str
    weights_estimate_bytes: int = Field(
        description="memory-budget's rule: parameters × bytes per value"
    )
    weights_measured_bytes: int
    workspace_bytes: int | None = Field(
        description="CUDA: allocations the first forward kept (cuBLAS workspace)"
    )
    activation_bytes_per_sequence: float | None = Field(description="Slope of peak vs batch")
    projected_max_batch: int | None = Field(description="Batch at which the slope reaches the cap")
    largest_fit_batch: int | None = Field(description="CUDA OOM search: largest batch that ran")
    first_oom_batch: int | None = Field(description="CUDA OOM search: smallest batch that failed")
    oom_message: str | None
    oom_search: str


class GapItem(BaseModel):
    item: str
    bytes: int | None
    note: str


class Result(LabResult):
    device: Literal["cuda", "cpu"]
    device_name: str
    measured: str = Field(description="What the numbers are: VRAM counters, or host RSS")
    workload: str
    param_count: int
    memory_cap_bytes: int
    measurements: list[Measurement]
    summaries: list[DtypeSummary]
    gap: list[GapItem]
    weights_mib: float = Field(description="Measured weights of the first dtype, MiB")
    activation_mib_per_sequence: float | None
    largest_batch: int | None = Field(
        description="Largest batch that fit in the first dtype (CUDA)"
    )
    cuda_context_mib: float | None
    notes: list[str]


# --- the workload ---------------------------------------------------------------


def weight_shapes(params: Params) -> list[tuple[int, int]]:
    """``[out, in]`` of every weight matrix (no biases, norms without weights)."""
    h = params.hidden_size
    if params.workload == "matmul-chain":
        return [(h, h)] * params.layers
    per_block = [(QKV_MATRICES * h, h), (h, h), (MLP_RATIO * h, h), (h, MLP_RATIO * h)]
    return per_block * params.layers


def weights_estimate(params: Params, dtype: str) -> int:
    """memory-budget's accounting for these matrices in ``dtype``, bytes."""
    fmt = memory.WEIGHT_FORMATS[dtype]
    return sum(fmt.matrix_bytes(r, c) for r, c in weight_shapes(params))


def make_model(
    params: Params, dtype: torch.dtype, device: str
) -> tuple[list[torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]:
    import torch
    import torch.nn.functional as F

    h = params.hidden_size
    gen = torch.Generator(device=device).manual_seed(0)
    weights = [
        torch.randn(r, c, generator=gen, device=device, dtype=dtype).mul_(c**-0.5)
        for r, c in weight_shapes(params)
    ]
    heads = h // HEAD_DIM

    def chain(x: torch.Tensor) -> torch.Tensor:
        for w in weights:
            x = F.gelu(x @ w.T)
        return x

    def blocks(x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        for i in range(0, len(weights), 4):
            w_qkv, w_o, w_up, w_down = weights[i : i + 4]
            y = F.layer_norm(x, (h,))
            q, k, v = (y @ w_qkv.T).view(b, s, QKV_MATRICES, heads, HEAD_DIM).permute(2, 0, 3, 1, 4)
            del y
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            del q, k, v
            x = x + a.transpose(1, 2).reshape(b, s, h) @ w_o.T
            del a
            x = x + F.gelu(F.layer_norm(x, (h,)) @ w_up.T) @ w_down.T
        return x

    return weights, chain if params.workload == "matmul-chain" else blocks


# --- reading memory -------------------------------------------------------------


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


@dataclass
class Nvml:
    """GPU utilization and memory.used for one device, by UUID: NVML, else nvidia-smi."""

    uuid: str | None
    source: str = "none"

    def query(self) -> tuple[float | None, int | None]:
        """(utilization %, memory.used bytes), or (None, None) when neither works."""
        got = nvml.utilization_and_used(self.uuid)
        if got is not None:
            self.source = "pynvml"
            return got
        reply = nvidia_smi.query(("utilization.gpu", "memory.used"), device=self.uuid)
        try:
            util_s, used_s = reply.rows()[0][:2]
            got = float(util_s), int(float(used_s) * MIB)
        except (ValueError, IndexError):
            return None, None
        self.source = "nvidia-smi"
        return got


def _is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text
    )


# --- one measurement ---------------------------------------------------------


@dataclass
class Probe:
    params: Params
    device: str
    forward: Callable[[torch.Tensor], torch.Tensor]
    dtype: torch.dtype
    dtype_name: str
    nvml: Nvml | None

    def measure(self, batch: int, timed: bool = False) -> Measurement:
        """One forward at ``batch``. With ``timed``, keep the GPU busy with more forwards for
        the utilization window, then read utilization and the steady-state rate. OOM
        propagates to the caller."""
        import torch

        p = self.params
        cuda = self.device == "cuda"
        tokens = batch * p.seq_len
        rss_before: int | None = None
        rss_peak: int | None = None
        allocated: int | None = None
        peak_reserved: int | None = None
        with torch.no_grad():
            if cuda:
                # One untimed pass first: CUDA loads kernels lazily, per shape, on first use.
                x = torch.randn(
                    batch, p.seq_len, p.hidden_size, device=self.device, dtype=self.dtype
                )
                self.forward(x)
                del x
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                held = torch.cuda.memory_allocated()
            else:
                trim_heap()
                reset_peak_rss()
                rss_before = rss_bytes() or 0
                held = rss_before
            cpu0, t0 = _cpu_seconds(), time.perf_counter()
            x = torch.randn(batch, p.seq_len, p.hidden_size, device=self.device, dtype=self.dtype)
            out = self.forward(x)
            if cuda:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            cpu_busy = (_cpu_seconds() - cpu0) / max(seconds, MIN_SECONDS)
            if cuda:
                peak = torch.cuda.max_memory_allocated()
                peak_reserved = torch.cuda.max_memory_reserved()
                allocated = torch.cuda.memory_allocated()
            else:
                rss_peak = max(peak_rss_bytes() or 0, rss_bytes() or 0)
                peak = rss_peak
            util: float | None = None if cuda else cpu_busy * 100
            if timed and cuda:
                t1 = time.perf_counter()
                iterations = 0
                while iterations < MAX_TIMED_ITERATIONS and (
                    time.perf_counter() - t1 < UTILIZATION_WINDOW_S
                ):
                    out = self.forward(x)
                    iterations += 1
                torch.cuda.synchronize()
                seconds = (time.perf_counter() - t1) / max(1, iterations)
                if self.nvml is not None:
                    util, _ = self.nvml.query()
            del x, out
        reserved = used = None
        if cuda:
            reserved = torch.cuda.memory_reserved()
            free, total = torch.cuda.mem_get_info()
            used = total - free
        return Measurement(
            dtype=self.dtype_name,
            batch=batch,
            ok=True,
            allocated_bytes=allocated,
            reserved_bytes=reserved,
            peak_allocated_bytes=peak if cuda else None,
            peak_reserved_bytes=peak_reserved,
            device_used_bytes=used,
            rss_before_bytes=rss_before,
            rss_peak_bytes=rss_peak,
            peak_bytes=peak,
            activation_peak_bytes=max(0, peak - held),
            seconds=seconds,
            tokens_per_s=tokens / max(seconds, MIN_SECONDS),
            utilization_pct=util,
        )

    def try_measure(self, batch: int, timed: bool = False) -> tuple[Measurement | None, str | None]:
        """``(measurement, None)``, or ``(None, first line of the OOM message)`` on CUDA."""
        import torch

        if self.device != "cuda":
            return self.measure(batch), None
        message = None
        try:
            return self.measure(batch, timed), None
        except (torch.cuda.OutOfMemoryError, RuntimeError) as exc:
            if not _is_oom(exc):
                raise
            message = str(exc).strip().splitlines()[0]
        # Outside the except block: the traceback (and the tensors its frames hold) is gone.
        gc.collect()
        torch.cuda.empty_cache()
        return None, message


def oom_row(dtype: str, batch: int) -> Measurement:
    return Measurement(
        dtype=dtype,
        batch=batch,
        ok=False,
        allocated_bytes=None,
        reserved_bytes=None,
        peak_allocated_bytes=None,
        peak_reserved_bytes=None,
        device_used_bytes=None,
        rss_before_bytes=None,
        rss_peak_bytes=None,
        peak_bytes=0,
        activation_peak_bytes=0,
        seconds=0.0,
        tokens_per_s=0.0,
        utilization_pct=None,
    )


def fit_line(points: list[tuple[int, int]]) -> tuple[float, float] | None:
    """Least-squares (intercept, slope) of peak bytes against batch; None under 2 batches."""
    if len({b for b, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(b for b, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((b - mx) ** 2 for b, _ in points)
    slope = sum((b - mx) * (y - my) for b, y in points) / sxx
    return my - slope * mx, slope


@dataclass
class OomSearch:
    largest_fit: int | None
    first_oom: int | None
    message: str | None
    how: str
    rows: list[Measurement]


def search_oom(
    probe: Probe, start_ok: int | None, start_oom: int | None, max_batch: int, deadline: float
) -> OomSearch:
    """From the largest batch that fit, double until OOM (at most ``max_batch``), then
    bisect the bracket. Stops early, saying so, once ``deadline`` (time.monotonic) passes."""
    rows: list[Measurement] = []
    lo, hi, message = start_ok or 0, start_oom, None

    def attempt(b: int) -> bool:
        nonlocal message
        m, msg = probe.try_measure(b)
        if m is None:
            message = msg
            rows.append(oom_row(probe.dtype_name, b))
            return False
        rows.append(m)
        return True

    while hi is None and lo < max_batch and time.monotonic() < deadline:
        b = min(max(1, 2 * lo), max_batch)
        if attempt(b):
            lo = b
        else:
            hi = b
    if hi is None:
        why = f"max_batch {max_batch} fits" if lo >= max_batch else "time budget spent"
        return OomSearch(lo or None, None, None, f"no OOM up to batch {lo} ({why})", rows)
    while hi - lo > max(1, lo * OOM_BISECT_RESOLUTION) and time.monotonic() < deadline:
        mid = (lo + hi) // 2
        if attempt(mid):
            lo = mid
        else:
            hi = mid
    how = f"OOM between batch {lo} (fits) and {hi} (fails)" if lo else f"OOM already at batch {hi}"
    return OomSearch(lo or None, hi, message, how, rows)


# --- the lab -----------------------------------------------------------------


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
    return report(params, ctx, dev, rows, summaries, notes)


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
    slope = fit[1] if fit and fit[1] > 0 else None
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
        ),
        rows,
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


def report(
    params: Params,
    ctx: Context,
    dev: Device,
    rows: list[Measurement],
    summaries: list[DtypeSummary],
    notes: list[str],
) -> Result:
    cuda = dev.kind == "cuda"
    ctx.progress(0.9, "reporting")
    if cuda:
        columns = [
            "dtype", "batch", "fits", "allocated (MiB)", "reserved (MiB)", "peak allocated (MiB)",
            "device used (MiB)", "activations (MiB)", "seconds", "tokens/s", "GPU util %",
        ]  # fmt: skip
        table = [
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
    else:
        columns = [
            "dtype", "batch", "RSS before (MiB)", "RSS peak (MiB)", "activations (MiB)",
            "seconds", "tokens/s", "CPU cores busy ×100",
        ]  # fmt: skip
        table = [
            [
                r.dtype,
                r.batch,
                _mib(r.rss_before_bytes),
                _mib(r.rss_peak_bytes),
                _mib(r.activation_peak_bytes),
                round(r.seconds, 4),
                round(r.tokens_per_s),
                None if r.utilization_pct is None else round(r.utilization_pct),
            ]  # fmt: skip
            for r in rows
        ]
    what = "VRAM" if cuda else "process RSS, not VRAM"
    ctx.table(f"Measurements on {dev.name} ({what})", columns, table)
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
            for s in summaries
        ],
    )
    first = summaries[0]
    gap, context = memory_gap(params, first, rows)
    if gap:
        ctx.table(
            f"Where the memory went ({first.dtype}) vs memory-budget's estimate",
            ["item", "MiB", "note"],
            [[g.item, _mib(g.bytes), g.note] for g in gap],
        )
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
    ctx.metric(
        "weights_mib",
        first.weights_measured_bytes / MIB,
        "MiB",
        f"weights measured ({first.dtype})",
    )
    if first.activation_bytes_per_sequence is not None:
        ctx.metric(
            "activation_mib_per_sequence",
            first.activation_bytes_per_sequence / MIB,
            "MiB",
            f"activations per sequence ({first.dtype})",
        )
    if first.largest_fit_batch is not None:
        ctx.metric(
            "largest_batch",
            first.largest_fit_batch,
            "sequences",
            f"largest batch that fit ({first.dtype})",
        )
    if context is not None:
        ctx.metric("cuda_context_mib", context / MIB, "MiB", "CUDA context and libraries")
    if len(summaries) > 1:
        ctx.log(_change_text(summaries[0], summaries[1]))

    from labs import plots

    series = {
        s.dtype: (
            [r.batch for r in rows if r.dtype == s.dtype and r.ok],
            [r.peak_bytes / MIB for r in rows if r.dtype == s.dtype and r.ok],
        )
        for s in summaries
    }
    ctx.plot(
        f"Peak {'GPU memory (allocated)' if cuda else 'process RSS'} against batch",
        plots.line_chart(
            series,
            title=f"{params.workload}, {params.layers} × hidden {params.hidden_size}",
            x_label="batch (sequences)",
            y_label="MiB (2^20 bytes)" if cuda else "MiB (2^20 bytes) of RSS",
            hlines={f"cap {dev.cap / MIB:.0f} MiB": dev.cap / MIB} if cuda else None,
            log_x=True,
        ),
        {
            "series": {k: {"batch": v[0], "mib": v[1]} for k, v in series.items()},
            "cap_mib": dev.cap / MIB,
        },
    )
    for note in notes:
        ctx.log(note)
    ctx.progress(1.0, "done")
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


LAB = Lab(
    id="vram-observe",
    title="Observe VRAM: allocated, reserved, peak and the OOM point",
    summary="Run a small transformer stack at several batch sizes and dtypes, read what torch.cuda "
    "and the driver report, find the batch that runs out of memory, and compare with the "
    "memory-budget estimate to name the gap (CUDA context, allocator cache, workspace). On a CPU "
    "it measures process RSS and says so.",
    needs_gpu=NeedsGPU.preferred,
    params=Params,
    run=run,
    time_limit_s=TIME_LIMIT_S,
    memory_limit_mb=4096,
    numeric_outputs=(
        ("weights_mib", "MiB"),
        ("activation_mib_per_sequence", "MiB"),
        ("largest_batch", "sequences"),
        ("cuda_context_mib", "MiB"),
    ),
)
