"""reproducibility's computation (torch is imported inside the functions)."""

from __future__ import annotations

import hashlib
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from labs.base import Context

if TYPE_CHECKING:
    import torch

from labs.reproducibility.model import (
    CUBLAS_WORKSPACE_CONFIG,
    FINGERPRINT_HEX_CHARS,
    FP8_E4M3_MAX,
    INT8_MAX,
    MIN_SCALE,
    TEST_CASE_LOGITS_SHOWN,
    Comparison,
    Environment,
    Params,
    Result,
)

Weights = dict[str, "torch.Tensor"]

Quantizer = Callable[["torch.Tensor"], "torch.Tensor"]


def build(params: Params, device: str) -> tuple[Weights, torch.Tensor]:
    """Weights and input batch from the seed, generated on the CPU (the same numbers on
    every device), then moved to ``device``."""
    import torch

    gen = torch.Generator().manual_seed(params.seed)
    w: Weights = {
        "w1": torch.randn(params.hidden, params.in_features, generator=gen)
        / params.in_features**0.5,
        "b1": torch.randn(params.hidden, generator=gen) * 0.1,
        "w2": torch.randn(params.classes, params.hidden, generator=gen) / params.hidden**0.5,
        "b2": torch.randn(params.classes, generator=gen) * 0.1,
    }
    x = torch.randn(params.batch, params.in_features, generator=gen)
    return {k: v.to(device) for k, v in w.items()}, x.to(device)


def forward(w: Weights, x: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.relu(x @ w["w1"].T + w["b1"]) @ w["w2"].T + w["b2"]


def int8_per_channel(w: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 fake-quantization, one scale per output row: amax/127."""
    import torch

    scale = (w.abs().amax(dim=1, keepdim=True) / INT8_MAX).clamp(min=MIN_SCALE)
    return torch.clamp(torch.round(w / scale), -INT8_MAX, INT8_MAX) * scale


def fp8_per_tensor(w: torch.Tensor) -> torch.Tensor:
    """E4M3 fake-quantization with one scale per tensor: amax/448, clamped before the cast.

    What an out-of-range value becomes in float8_e4m3fn depends on the code path: torch
    2.13's tensor cast (``.to``) on the CPU saturates to ±448; c10's scalar conversion
    (``fp8e4m3fn_from_fp32_value``) gives NaN from 480 up, and torch.full or fill_ with such
    a scalar raise an overflow error; GPU kernels differ again (PTX's ``cvt`` saturates only
    with ``.satfinite``). Clamping to ±448 first is the portable rule: every path agrees."""
    import torch

    scale = (w.abs().amax() / FP8_E4M3_MAX).clamp(min=MIN_SCALE)
    scaled = torch.clamp(w / scale, -FP8_E4M3_MAX, FP8_E4M3_MAX)
    return scaled.to(torch.float8_e4m3fn).to(torch.float32) * scale


def int8_quantizer(notes: list[str]) -> tuple[str, Quantizer]:
    """labs.quant's int8 (per channel) if it imports, else the inline one — said in ``notes``
    (for the log)."""
    try:
        from labs.quant import quantize
    except Exception as exc:  # any import failure: the drill still runs with the inline quantizer
        notes.append(
            f"labs.quant is not importable ({type(exc).__name__}: {exc}); using the inline "
            "int8 quantizer."
        )
        return "inline", int8_per_channel

    def via_library(w: torch.Tensor) -> torch.Tensor:
        return quantize(w, "int8", granularity="channel").dequantize()

    return "labs.quant", via_library


def fingerprint(t: torch.Tensor) -> str:
    """SHA-256 of the tensor's bytes (a bitwise identity, not a tolerance)."""
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def environment(device: str, deterministic: bool) -> Environment:
    import torch

    cuda = device == "cuda"
    return Environment(
        torch=torch.__version__,
        python=platform.python_version(),
        platform=platform.platform(),
        device=device,
        device_name=torch.cuda.get_device_name()
        if cuda
        else (platform.processor() or platform.machine()),
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version()
        if cuda and torch.backends.cudnn.is_available()
        else None,
        threads=torch.get_num_threads(),
        dtype="float32",
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        deterministic_algorithms=deterministic,
        cublas_workspace_config=os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )


def run(params: Params, ctx: Context) -> Trial:
    import torch

    device = "cuda" if ctx.device == "cuda" and torch.cuda.is_available() else "cpu"
    if params.deterministic and device == "cuda" and "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
        # Read when cuBLAS creates its handle: this run's process has not used it yet.
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG
        ctx.log(f"Set CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE_CONFIG} before the first matmul.")
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(params.deterministic, warn_only=True)
    try:
        return compare(params, device, ctx.progress)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)


@dataclass
class Trial:
    """The computed result and what ``present`` shows beside it (not part of the result)."""

    result: Result
    device: str
    runs_top1: float  # top-1 agreement of run 1 and run 2
    threads_max_abs_diff: float | None
    # Per format: the test case's first logits, [class, fp32, low precision, difference].
    test_case_logits: dict[str, list[list[float]]] = field(default_factory=dict)
    diffs_per_input: list[float] = field(default_factory=list)  # first format, per input
    notes: list[str] = field(default_factory=list)  # said before the comparisons


def _no_progress(fraction: float, message: str = "") -> None:
    pass


def compare(
    params: Params, device: str, progress: Callable[[float, str], None] = _no_progress
) -> Trial:
    """Run the seeded model twice, alone and in the batch, on one thread and many, and with
    low-precision weights; every comparison bitwise and by its largest difference.
    ``progress`` hears of each step as it starts."""
    import torch

    progress(0.05, "recording the environment")
    env = environment(device, params.deterministic)
    progress(0.15, "run 1 and run 2")
    with torch.no_grad():
        w, x = build(params, device)
        ref = forward(w, x)
        w2, x2 = build(params, device)
        again = forward(w2, x2)
    runs_equal = torch.equal(ref, again)
    runs_diff = _max_abs(ref, again)
    digest = fingerprint(ref)[:FINGERPRINT_HEX_CHARS]
    findings = [
        f"Two runs from seed {params.seed}: "
        + ("bitwise equal" if runs_equal else f"NOT bitwise equal (max |Δ| {runs_diff:.3g})")
        + f"; fingerprint {digest}. Compare this fingerprint before and after an update."
    ]
    i = params.test_case
    progress(0.3, "batch invariance")
    with torch.no_grad():
        alone = forward(w, x[i : i + 1])
    batch_equal = torch.equal(alone[0], ref[i])
    batch_diff = _max_abs(alone[0], ref[i])
    findings.append(
        f"Test case {i} alone vs inside the batch of {params.batch}: "
        + (
            "bitwise equal"
            if batch_equal
            else f"differs by up to {batch_diff:.3g} — the matmul kernel picked for 1 row sums in "
            "another order than the one for the batch"
        )
        + "."
    )
    threads_equal, threads_diff = _threads_comparison(w, x, ref, device, findings)
    progress(0.5, "fp32 vs low-precision weights")
    low = _low_precision(params, w, x, ref)
    comparisons = low.comparisons
    for c in comparisons:
        flipped = round((1 - c.top1_agreement) * params.batch)
        findings.append(
            f"fp32 vs {c.format}: weights off by {c.weight_rel_error:.2%} (relative), logits "
            "by up to "
            f"{c.max_abs_diff:.3g}; {flipped} of {params.batch} top-1 predictions changed "
            f"(test case {i}: class {c.test_case_top1_fp32} → {c.test_case_top1})."
        )
    by_fmt = {c.format: c for c in comparisons}
    result = Result(
        environment=env,
        seed=params.seed,
        input_shape=[params.batch, params.in_features],
        test_case=i,
        fingerprint=digest,
        runs_bitwise_equal=runs_equal,
        runs_max_abs_diff=runs_diff,
        batch_invariant=batch_equal,
        batch_max_abs_diff=batch_diff,
        threads_bitwise_equal=threads_equal,
        comparisons=comparisons,
        int8_top1_agreement=by_fmt["int8"].top1_agreement if "int8" in by_fmt else None,
        int8_max_abs_diff=by_fmt["int8"].max_abs_diff if "int8" in by_fmt else None,
        fp8_top1_agreement=by_fmt["fp8"].top1_agreement if "fp8" in by_fmt else None,
        fp8_max_abs_diff=by_fmt["fp8"].max_abs_diff if "fp8" in by_fmt else None,
        findings=findings,
    )
    return Trial(
        result=result,
        device=device,
        runs_top1=float((again.argmax(dim=1) == ref.argmax(dim=1)).float().mean()),
        threads_max_abs_diff=threads_diff,
        test_case_logits=low.test_case_logits,
        diffs_per_input=low.diffs_per_input,
        notes=low.notes,
    )


def _threads_comparison(
    w: Weights, x: torch.Tensor, ref: torch.Tensor, device: str, findings: list[str]
) -> tuple[bool | None, float | None]:
    """On a multi-threaded CPU: the same forward on one thread against ``ref`` (bitwise
    equal, max |difference|); ``(None, None)`` elsewhere."""
    import torch

    if not (device == "cpu" and torch.get_num_threads() > 1):
        return None, None
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            single = forward(w, x)
    finally:
        torch.set_num_threads(n)
    equal = torch.equal(single, ref)
    diff = _max_abs(single, ref)
    findings.append(
        f"1 thread vs {n} threads: "
        + ("bitwise equal" if equal else f"differs by up to {diff:.3g}")
        + "."
    )
    return equal, diff


@dataclass
class _LowPrecision:
    comparisons: list[Comparison] = field(default_factory=list)
    test_case_logits: dict[str, list[list[float]]] = field(default_factory=dict)
    diffs_per_input: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _low_precision(params: Params, w: Weights, x: torch.Tensor, ref: torch.Tensor) -> _LowPrecision:
    """fp32 against int8 and/or fp8 weights (activations stay fp32)."""
    import torch

    low = _LowPrecision()

    i = params.test_case
    formats = ["int8", "fp8"] if params.low_precision == "both" else [params.low_precision]
    quantizers: dict[str, tuple[str, Quantizer]] = {
        "fp8": ("inline E4M3, per-tensor scale", fp8_per_tensor)
    }
    if "int8" in formats:
        quantizers["int8"] = int8_quantizer(low.notes)
    ref_top1 = ref.argmax(dim=1)
    for fmt in formats:
        quantizer, fn = quantizers[fmt]
        with torch.no_grad():
            wq = dict(w, w1=fn(w["w1"]), w2=fn(w["w2"]))
            out = forward(wq, x)
        err = torch.sqrt(((wq["w1"] - w["w1"]) ** 2).sum() + ((wq["w2"] - w["w2"]) ** 2).sum())
        norm = torch.sqrt((w["w1"] ** 2).sum() + (w["w2"] ** 2).sum())
        top1 = out.argmax(dim=1)
        per_row = (out - ref).abs().amax(dim=1)
        low.comparisons.append(
            Comparison(
                format=fmt,
                quantizer=quantizer,
                bitwise_equal=torch.equal(out, ref),
                weight_rel_error=float(err / norm),
                max_abs_diff=float(per_row.max()),
                mean_abs_diff=float((out - ref).abs().mean()),
                top1_agreement=float((top1 == ref_top1).float().mean()),
                test_case_top1_fp32=int(ref_top1[i]),
                test_case_top1=int(top1[i]),
            )
        )
        if not low.diffs_per_input:
            low.diffs_per_input = per_row.cpu().tolist()
        low.test_case_logits[fmt] = [
            [c, float(ref[i, c]), float(out[i, c]), float(out[i, c] - ref[i, c])]
            for c in range(min(params.classes, TEST_CASE_LOGITS_SHOWN))
        ]
    return low
