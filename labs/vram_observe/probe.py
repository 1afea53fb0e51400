"""vram-observe's workload and its measurements: build the weights, run one forward at a
batch, read the memory counters, and search for the out-of-memory point.

torch is imported inside the functions, so importing this module imports no torch.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from labs.catalog import formats
from labs.hardware import nvidia_smi, nvml
from labs.hardware.host_memory import peak_rss_bytes, reset_peak_rss, rss_bytes, trim_heap
from labs.vram_observe.model import (
    HEAD_DIM,
    MAX_TIMED_ITERATIONS,
    MIB,
    MIN_SECONDS,
    MLP_RATIO,
    OOM_BISECT_RESOLUTION,
    QKV_MATRICES,
    UTILIZATION_WINDOW_S,
    Measurement,
    Params,
)

if TYPE_CHECKING:
    import torch


def weight_shapes(params: Params) -> list[tuple[int, int]]:
    """``[out, in]`` of every weight matrix (no biases, norms without weights)."""
    h = params.hidden_size
    if params.workload == "matmul-chain":
        return [(h, h)] * params.layers
    per_block = [(QKV_MATRICES * h, h), (h, h), (MLP_RATIO * h, h), (h, MLP_RATIO * h)]
    return per_block * params.layers


def weights_estimate(params: Params, dtype: str) -> int:
    """memory-budget's accounting for these matrices in ``dtype``, bytes."""
    fmt = formats.WEIGHT_FORMATS[dtype]
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
