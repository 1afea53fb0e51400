"""Lab ``scale-derivation``: the scale of a quantized tensor, step by step.

The learner types a few numbers. The lab derives the scale the way the format
does — ``amax``, the largest element value ``qmax``, ``scale = amax / qmax``
(NVFP4: a float32 tensor scale and E4M3 block scales; MXFP4: a power-of-two
scale per block of 32) — then each value's ``x / scale``, its rounded element,
the dequantized value, its error, and whether it was clipped. Optionally the
scale comes from a percentile of |x| or is typed in, which clips the largest
values; the error is then split into rounding and clipping error.

Three edge cases that break real quantizers are run every time:
- the all-zero tensor: ``amax / qmax = 0`` and ``0 / 0`` is NaN; guarded
  quantizers give exact zeros instead;
- FP8 overflow: casting a value beyond the format's range with torch gives
  inf for float8_e5m2 (what float8_e4m3fn gives is shown as observed); clamping
  *before* the cast gives the largest finite value;
- the rounding vs clipping split of the error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, Field, FiniteFloat, model_validator

from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU
from labs.presenters import concepts, headlines
from labs.quant.metrics import ErrorSummary
from labs.quant.spec import FormatKey

if TYPE_CHECKING:
    import torch

    from labs.quant import QuantizedTensor

FormatChoice = Literal[
    FormatKey.INT8,
    FormatKey.INT4,
    FormatKey.FP8_E4M3,
    FormatKey.FP8_E5M2,
    FormatKey.NVFP4,
    FormatKey.MXFP4,
]
# Formats with one float32 scale per tensor, whose scale the learner may set.
PER_TENSOR_FORMATS = (FormatKey.INT8, FormatKey.INT4, FormatKey.FP8_E4M3, FormatKey.FP8_E5M2)
INTEGER_FORMATS = (FormatKey.INT8, FormatKey.INT4)
FP8_DTYPES = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}

# Fifteen ordinary values and one outlier: the outlier alone sets the scale.
DEFAULT_VALUES = (
    0.12, -0.53, 0.31, 0.9, -1.24, 0.05, 0.71, -0.26,
    7.5, 0.44, -0.83, 0.17, 0.62, -0.04, 1.1, -0.35,
)  # fmt: skip
MAX_VALUES = 4096
MIN_PERCENTILE = 50.0
MAX_PERCENTILE = 100.0
MAX_SCALE = 1e30
FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max; larger becomes inf
FLOAT32_MIN_NORMAL = 2.0**-126  # a smaller scale loses precision, and below 2**-149 is 0
# The result and the per-element table show at most this many values and blocks.
SHOWN_ELEMENTS = 64
SHOWN_BLOCKS = 32
PERCENT = 100.0
# Where float8 overflow is probed, as multiples of the format's largest finite value.
CAST_PROBE_MULTIPLES = (0.5, 1.05, 1.2, 4.0, -4.0)
# A quotient that overflows float32 on its way to the cast: 1e30 / 1e-30.
OVERFLOW_NUMERATOR = 1e30
OVERFLOW_DENOMINATOR = 1e-30


class Params(LabParams):
    values: list[Annotated[FiniteFloat, Field(ge=-FLOAT32_MAX, le=FLOAT32_MAX)]] = Field(
        default=list(DEFAULT_VALUES),
        min_length=1,
        max_length=MAX_VALUES,
        description=f"The tensor: 1 to {MAX_VALUES} finite float32 numbers, e.g. [0.1, -2.5, 3.0]. "
        "The default has one outlier (7.5) among values below 1.3",
    )
    format: FormatChoice = Field(
        default=FormatKey.INT8,
        description="int8 or int4 (symmetric, one float32 scale), fp8_e4m3 or fp8_e5m2 (one "
        "float32 scale), nvfp4 (float32 tensor scale and E4M3 scale per 16) or mxfp4 "
        "(power-of-two E8M0 scale per 32)",
    )
    clip_percentile: float | None = Field(
        default=None,
        ge=MIN_PERCENTILE,
        le=MAX_PERCENTILE,
        description="int8/int4/fp8 only: take amax as this percentile of |x| instead of its "
        "maximum (e.g. 90), so the values above it are clipped",
    )
    scale: float | None = Field(
        default=None,
        ge=FLOAT32_MIN_NORMAL,
        le=MAX_SCALE,
        description="int8/int4/fp8 only: use this scale instead of amax / qmax (value units per "
        "element step); a scale below amax / qmax clips",
    )

    @model_validator(mode="after")
    def _override_fits_format(self) -> Params:
        chosen = [n for n in ("clip_percentile", "scale") if getattr(self, n) is not None]
        if len(chosen) > 1:
            raise ValueError("give clip_percentile or scale, not both")
        if chosen and self.format not in PER_TENSOR_FORMATS:
            raise ValueError(
                f"{chosen[0]} applies to one per-tensor scale ({', '.join(PER_TENSOR_FORMATS)}); "
                f"{self.format} derives its block scales itself"
            )
        return self


class ElementStep(BaseModel):
    index: int
    x: float
    x_over_scale: float = Field(description="x divided by its block's effective scale")
    element: float = Field(description="The rounded (and clamped) element value")
    code: str = Field(description="The stored code: an integer, or the bit pattern in hex")
    dequantized: float
    error: float = Field(description="dequantized − x")
    clipped: bool


class BlockStep(BaseModel):
    block: int
    amax: float
    exact_scale: float = Field(
        description="The scale before rounding to its stored type: NVFP4 amax_b / 6 / "
        "tensor_scale (E4M3 units), MXFP4 amax_b / 6"
    )
    stored_scale: float = Field(description="The stored scale, decoded (E4M3 or E8M0)")
    effective_scale: float = Field(description="What one element unit is worth in this block")
    derivation: str
    matches_labs_quant: bool = Field(description="The rule, applied here, gives the stored scale")


class ZeroCase(BaseModel):
    n_values: int
    naive_scale: float = Field(description="amax / qmax for an all-zero tensor: 0")
    naive_dequantized: list[str] = Field(description="(0 / 0) rounded and rescaled: NaN")
    naive_has_nan: bool
    eps_scale: float = Field(
        description="The scale clamped to float32 eps, as PyTorch observers do"
    )
    eps_dequantized_all_zero: bool
    labs_quant_scale: float = Field(description="The scale labs.quant stores for it")
    labs_quant_dequantized_all_zero: bool
    labs_quant_has_nan: bool
    clamp_of_nan: str = Field(
        description="torch.clamp(NaN, -qmax, qmax): a clamp does not cure NaN"
    )


class CastDemo(BaseModel):
    dtype: str
    max_finite: float
    probes: list[str] = Field(description="What each probe value is")
    inputs: list[float | str]
    cast_then_clamp: list[float | str] = Field(
        description="Stored fp8 value when the cast comes first (a clamp afterwards is too late)"
    )
    clamp_on_fp8_tensor: str = Field(
        description="What torch does when asked to clamp the fp8 tensor"
    )
    clamp_then_cast: list[float | str] = Field(description="Stored fp8 value when clamped first")
    cast_then_clamp_nonfinite: int
    clamp_then_cast_nonfinite: int
    dot_cast_then_clamp: float | str = Field(description="Σ stored·(+1, −1, …), cast first")
    dot_clamp_then_cast: float | str = Field(description="Σ stored·(+1, −1, …), clamped first")


class Result(LabResult):
    format: str
    n_values: int
    amax: float
    qmax: float = Field(description="Largest element value of the format (before scaling)")
    scale_source: str
    scale: float | None = Field(
        description="The per-tensor scale: amax / qmax (int/fp8, after any override) or NVFP4's "
        "float32 tensor scale; None for MXFP4"
    )
    first_block_scale: float = Field(description="Effective scale of the first block")
    blocks: list[BlockStep]
    elements: list[ElementStep]
    elements_shown: int
    matches_labs_quant: bool | None = Field(
        description="The step-by-step result equals labs.quant's; None with an overridden scale"
    )
    error: ErrorSummary
    max_abs_error: float
    clipped: int
    zero_case: ZeroCase
    casts: list[CastDemo]


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


def run(params: Params, ctx: Context) -> Result:
    from labs.presenters.scale_derivation import present

    derivation = derive(params)
    present(derivation, ctx)
    return derivation.result


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


def derive(params: Params) -> Derivation:
    """Every step of the scale derivation, the three edge cases, and the error split."""
    import torch

    from labs.quant.metrics import clipped_beyond, error_split

    fmt = params.format
    x = torch.tensor(params.values, dtype=torch.float32)
    n = x.numel()
    qmax = _qmax(fmt)
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
        zero_case=_zero_case(fmt, min(n, SHOWN_ELEMENTS), qmax),
        casts=[cast_demo(f) for f in FP8_DTYPES],
    )
    return Derivation(result, sc.lines, sc.n_blocks)


LAB = Lab(
    id="scale-derivation",
    title="Derive a scale step by step",
    summary="Type a few numbers and watch the scale being derived (amax, qmax, scale = amax / qmax; "
    "NVFP4 and MXFP4 block scales), each value rounded and clipped, the all-zero tensor that "
    "makes a naive quantizer divide 0 by 0, and why FP8 clamps before it casts.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    time_limit_s=30.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("amax", "value units"),
        ("scale", "value units per step"),
        ("clipped", "values"),
        ("max_abs_error", "value units"),
    ),
    headline=headlines.scale_derivation,
    concept=concepts.scale_derivation,
)
