"""scale-derivation's computation: each step of the scale, the all-zero tensor and
the fp8 casts, from labs.quant's own quantization. Torch is imported inside the
functions."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from labs.base import Context
from labs.quant.metrics import ErrorSummary
from labs.scale_derivation.model import (
    CAST_PROBE_MULTIPLES,
    FP8_DTYPES,
    INTEGER_FORMATS,
    OVERFLOW_DENOMINATOR,
    OVERFLOW_NUMERATOR,
    PER_TENSOR_FORMATS,
    PERCENT,
    SHOWN_BLOCKS,
    SHOWN_ELEMENTS,
    BlockStep,
    CastDemo,
    ElementStep,
    Params,
    Result,
    ZeroCase,
)

if TYPE_CHECKING:
    import torch

    from labs.quant import QuantizedTensor


def _num(v: float) -> float | str:
    """A float, or its name when it is not finite (results are strict JSON)."""
    return v if math.isfinite(v) else str(v)


def _qmax(fmt: str) -> float:
    from labs.quant import FORMAT_LIMITS

    return float(FORMAT_LIMITS[fmt]["max"])


def _round_elements(y: torch.Tensor, fmt: str, qmax: float) -> tuple[torch.Tensor, list[str]]:
    """Round ``y = x / scale`` to the format's elements, clamping first: the element
    values (float32) and the stored codes as text."""
    import torch

    clamped = y.clamp(-qmax, qmax)
    if fmt in INTEGER_FORMATS:
        codes = torch.round(clamped)  # half to even, as labs.quant
        return codes, [str(int(c)) for c in codes.tolist()]
    fp8 = clamped.to(getattr(torch, FP8_DTYPES[fmt]))
    bits = fp8.view(torch.uint8).tolist()
    return fp8.float(), [f"0x{b:02x}" for b in bits]


@dataclass
class _Scales:
    """One way of deriving the scale: per element, its effective scale, element and code."""

    scale_e: torch.Tensor  # effective scale of every element, float32
    elements: torch.Tensor  # the rounded element values, float32
    codes: list[str]
    amax: float
    source: str
    lines: list[str]  # how the scale was derived, for the log
    deq: torch.Tensor
    lo: torch.Tensor  # the representable range per element, for the clipping split
    hi: torch.Tensor
    tensor_scale: float | None
    matches: bool | None  # equals labs.quant's own dequantized tensor (None: not comparable)
    blocks: list[BlockStep] = field(default_factory=list)
    n_blocks: int = 1


def _per_tensor(x: torch.Tensor, params: Params, qmax: float) -> _Scales:
    """int/fp8 with one scale, derived from amax, a percentile or the typed-in value."""
    import torch

    amax = float(x.abs().max())
    lines = [f"amax = max|x| = {amax:.6g}", f"qmax = {qmax:g} (largest {params.format} element)"]
    if params.scale is not None:
        scale, source = params.scale, "manual"
        lines.append(f"scale = {scale:.6g} (typed in; amax / qmax would be {amax / qmax:.6g})")
    elif params.clip_percentile is not None:
        p = params.clip_percentile
        clip_amax = float(torch.quantile(x.abs().double(), p / PERCENT))
        scale, source = float(torch.tensor(clip_amax / qmax, dtype=torch.float32)), "percentile"
        lines.append(
            f"amax_clip = percentile {p:g} of |x| = {clip_amax:.6g}; scale = amax_clip / qmax = {scale:.6g}"
        )
    else:
        # float32 division, as the quantizer does it.
        scale = float(torch.tensor(amax, dtype=torch.float32) / qmax)
        source = "absmax"
        lines.append(f"scale = amax / qmax = {amax:.6g} / {qmax:g} = {scale:.6g}")
    if scale == 0:
        lines.append("scale = 0: an all-zero tensor; the division below uses 1 instead (0 / 1 = 0)")
    from labs.quant import quantize

    divisor = torch.full_like(x, scale if scale != 0 else 1.0)
    elements, codes = _round_elements(x / divisor, params.format, qmax)
    scale_e = torch.full_like(x, scale)
    deq = elements * scale_e
    matches = None
    if source == "absmax":
        reference = quantize(x, params.format, granularity="tensor").dequantize()
        matches = bool(torch.equal(reference, deq))
    return _Scales(
        scale_e, elements, codes, amax, source, lines, deq, -qmax * scale_e, qmax * scale_e,
        float(scale_e[0]), matches,
    )  # fmt: skip


def _block_steps(q: QuantizedTensor, x: torch.Tensor, fmt: str, qmax: float) -> list[BlockStep]:
    """The NVFP4 / MXFP4 block scale derivation, block by block, recomputed here from the
    rules and checked against what labs.quant stored."""
    import torch

    from labs.quant import E8M0_EXPONENT_BIAS, F8_E4M3_MAX, FORMAT_LIMITS

    layout = q.layout
    pad = layout.padded_row_len - layout.row_len
    rows = torch.cat([x, x[-1:].expand(pad)]) if pad else x
    blocks = rows.reshape(layout.n_blocks, layout.block_len)
    stored = q.scales.tolist()
    effective, _ = q.scale_offset()
    elem_emax = FORMAT_LIMITS["e2m1"]["emax"]
    steps = []
    for b in range(min(layout.n_blocks, SHOWN_BLOCKS)):
        amax_b = float(blocks[b].abs().max())
        if fmt == "nvfp4":
            assert q.tensor_scale is not None
            tensor_scale = q.tensor_scale.float()
            # float32 arithmetic, then E4M3 rounding (torch's cast, after the clamp).
            exact_t = (
                torch.tensor(amax_b) / qmax / tensor_scale if tensor_scale else torch.tensor(0.0)
            )
            derived = float(exact_t.clamp(max=F8_E4M3_MAX).to(torch.float8_e4m3fn).float())
            exact = float(exact_t)
            text = (
                f"amax_b / {qmax:g} / tensor_scale = {exact:.6g} → E4M3 {derived:.6g} "
                f"(≤ {F8_E4M3_MAX:g}); × tensor_scale = {float(effective[b]):.6g}"
            )
        else:
            exact = amax_b / qmax
            if amax_b > 0:
                # frexp is exact: amax_b = f · 2^e with f in [0.5, 1), so floor(log2) = e − 1.
                exponent = math.frexp(amax_b)[1] - 1
                derived = 2.0 ** max(exponent - elem_emax, -E8M0_EXPONENT_BIAS)
                text = (
                    f"floor(log2 {amax_b:.6g}) = {exponent}; 2^({exponent} − {elem_emax}) = "
                    f"{derived:.6g}; largest |x| / scale = {amax_b / derived:.4g}"
                )
            else:
                derived = 2.0**-E8M0_EXPONENT_BIAS
                text = f"amax_b = 0: the smallest E8M0 scale, 2^-{E8M0_EXPONENT_BIAS}; elements 0"
        steps.append(
            BlockStep(
                block=b,
                amax=amax_b,
                exact_scale=exact,
                stored_scale=stored[b],
                effective_scale=float(effective[b]),
                derivation=text,
                matches_labs_quant=derived == stored[b],
            )
        )
    return steps


def _zero_case(fmt: str, n: int, qmax: float) -> ZeroCase:
    import torch

    from labs.quant import quantize

    zeros = torch.zeros(n)
    naive_scale = zeros.abs().max() / qmax
    naive = torch.round(zeros / naive_scale) * naive_scale  # 0 / 0
    eps = torch.finfo(torch.float32).eps
    eps_scale = torch.clamp(naive_scale, min=eps)
    eps_deq = torch.round(zeros / eps_scale) * eps_scale
    q = quantize(zeros, fmt, **({"granularity": "tensor"} if fmt in PER_TENSOR_FORMATS else {}))
    deq = q.dequantize()
    stored = q.tensor_scale if q.tensor_scale is not None else q.scales.reshape(-1)[0]
    return ZeroCase(
        n_values=n,
        naive_scale=float(naive_scale),
        naive_dequantized=[str(v) for v in naive[:4].tolist()],
        naive_has_nan=bool(naive.isnan().any()),
        eps_scale=float(eps_scale),
        eps_dequantized_all_zero=bool((eps_deq == 0).all()),
        labs_quant_scale=float(stored),
        labs_quant_dequantized_all_zero=bool((deq == 0).all()),
        labs_quant_has_nan=bool(deq.isnan().any()),
        clamp_of_nan=str(float(torch.tensor(float("nan")).clamp(-qmax, qmax))),
    )


def cast_demo(fmt: str) -> CastDemo:
    """Probe torch's float32 → ``fmt`` cast beyond the range, cast first and clamped first."""
    import torch

    from labs.quant import FORMAT_LIMITS

    dtype = getattr(torch, FP8_DTYPES[fmt])
    top = float(FORMAT_LIMITS[fmt]["max"])
    overflow = torch.tensor(OVERFLOW_NUMERATOR) / torch.tensor(OVERFLOW_DENOMINATOR)
    y = torch.cat([torch.tensor([m * top for m in CAST_PROBE_MULTIPLES]), overflow.reshape(1)])
    labels = [f"{m:g}·max" for m in CAST_PROBE_MULTIPLES] + ["x/scale that overflowed float32"]
    stored_first = y.to(dtype)
    try:
        stored_first.clamp(-top, top)
        clamp_note = (
            "torch clamped the fp8 tensor (the stored bits were already decided by the cast)"
        )
    except (NotImplementedError, RuntimeError) as e:  # torch has no fp8 clamp on some devices
        clamp_note = f"{type(e).__name__}: {e}"
    cast_first = stored_first.float()
    clamp_first = y.clamp(-top, top).to(dtype).float()
    signs = torch.tensor([(-1.0) ** i for i in range(len(y))])
    return CastDemo(
        dtype=str(dtype).removeprefix("torch."),
        max_finite=top,
        probes=labels,
        inputs=[_num(v) for v in y.tolist()],
        cast_then_clamp=[_num(v) for v in cast_first.tolist()],
        clamp_on_fp8_tensor=clamp_note,
        clamp_then_cast=[_num(v) for v in clamp_first.tolist()],
        cast_then_clamp_nonfinite=int((~cast_first.isfinite()).sum()),
        clamp_then_cast_nonfinite=int((~clamp_first.isfinite()).sum()),
        dot_cast_then_clamp=_num(float((cast_first * signs).sum())),
        dot_clamp_then_cast=_num(float((clamp_first * signs).sum())),
    )


@dataclass(frozen=True)
class Derivation:
    """The computed result and the narration that explains it (not part of the result)."""

    result: Result
    lines: list[str]  # how the scale was derived, one log line each
    n_blocks: int


def run(params: Params, ctx: Context) -> Derivation:
    return derive(params, ctx.progress)


def _no_progress(fraction: float, message: str = "") -> None:
    pass


def _format_scales(x: torch.Tensor, fmt: str, qmax: float) -> _Scales:
    """NVFP4 / MXFP4: the effective scale of every element, the elements, codes, bounds,
    block steps and derivation lines, from labs.quant's own quantization."""
    import torch

    from labs.quant import F8_E4M3_MAX, FORMAT_LIMITS, quantize
    from labs.quant.metrics import element_bounds

    q = quantize(x, fmt)
    amax = float(x.abs().max())
    affine = q.affine()
    scale_e = q.unblock(affine.scale[:, None].expand(affine.elements.shape))
    elements = q.unblock(affine.elements)
    deq = q.dequantize()
    blocks = _block_steps(q, x, fmt, qmax)
    tensor_scale = float(q.tensor_scale) if q.tensor_scale is not None else None
    lines = [f"amax = max|x| = {amax:.6g}", f"element max = {qmax:g} (E2M1)"]
    if fmt == "nvfp4":
        lines.append(
            f"tensor_scale = amax / ({F8_E4M3_MAX:g} · {qmax:g}) = {tensor_scale:.6g} (float32); "
            f"each block of 16: E4M3(amax_b / {qmax:g} / tensor_scale), effective scale = "
            "tensor_scale × E4M3 scale"
        )
    else:
        emax = FORMAT_LIMITS["e2m1"]["emax"]
        lines.append(
            f"each block of 32: scale = 2^(floor(log2 amax_b) − {emax}) (E8M0, OCP MX v1.0), "
            f"so amax_b / scale lies in [{2**emax:g}, {2 ** (emax + 1):g}) and values beyond "
            f"{qmax:g} are clipped"
        )
    lo, hi = element_bounds(q)
    return _Scales(
        scale_e=scale_e,
        elements=elements,
        codes=[f"0x{int(c):x}" for c in q.codes.tolist()],
        amax=amax,
        source="format",
        lines=lines,
        deq=deq,
        lo=lo,
        hi=hi,
        tensor_scale=tensor_scale,
        matches=bool(torch.equal(elements * scale_e, deq))
        and all(b.matches_labs_quant for b in blocks),
        blocks=blocks,
        n_blocks=q.layout.n_blocks,
    )


def derive(params: Params, progress: Callable[[float, str], None] = _no_progress) -> Derivation:
    """Every step of the scale derivation, the three edge cases, and the error split;
    ``progress`` hears of each step as it starts."""
    import torch

    from labs.quant.metrics import clipped_beyond, error_split

    fmt = params.format
    x = torch.tensor(params.values, dtype=torch.float32)
    n = x.numel()
    qmax = _qmax(fmt)
    progress(0.05, "deriving the scale")
    sc = _per_tensor(x, params, qmax) if fmt in PER_TENSOR_FORMATS else _format_scales(x, fmt, qmax)
    scale_e, elements, deq = sc.scale_e, sc.elements, sc.deq
    y = x / torch.where(scale_e == 0, torch.ones_like(scale_e), scale_e)
    error = deq - x
    clipped = clipped_beyond(x, sc.lo, sc.hi)
    split = ErrorSummary.of(error_split(x, deq, clipped))
    shown = min(n, SHOWN_ELEMENTS)
    steps = [
        ElementStep(
            index=i,
            x=float(x[i]),
            x_over_scale=float(y[i]),
            element=float(elements[i]),
            code=sc.codes[i],
            dequantized=float(deq[i]),
            error=float(error[i]),
            clipped=bool(clipped[i]),
        )
        for i in range(shown)
    ]
    progress(0.6, "the all-zero tensor")
    zero_case = _zero_case(fmt, min(n, SHOWN_ELEMENTS), qmax)
    progress(0.8, "fp8 casts: clamp first or cast first")
    result = Result(
        format=fmt,
        n_values=n,
        amax=sc.amax,
        qmax=qmax,
        scale_source=sc.source,
        scale=sc.tensor_scale,
        first_block_scale=float(scale_e[0]),
        blocks=sc.blocks,
        elements=steps,
        elements_shown=shown,
        matches_labs_quant=sc.matches,
        error=split,
        max_abs_error=split.max_abs_error,
        clipped=split.clipped,
        zero_case=zero_case,
        casts=[cast_demo(f) for f in FP8_DTYPES],
    )
    return Derivation(result, sc.lines, sc.n_blocks)
