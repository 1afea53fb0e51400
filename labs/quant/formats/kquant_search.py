"""The scale searches of llama.cpp's k-quants, in its float32 arithmetic:
``make_qkx2_quants`` (q4_k's sub-block scale and min) and ``make_qx_quants`` (q6_k's
sub-block scale), with the exactly rounded helpers they need. ``gguf_k`` builds the
formats on them.

Arithmetic, in float32 in the C code's order: sums accumulated left to right as its loops
do, divisions and ``sqrtf`` correctly rounded (torch's ``scalar / tensor`` and its float32
CPU ``sqrt`` are not, hence ``div_f32`` and ``sqrtf``). ``nearest_int(f)`` is the low 23
bits of ``f + 1.5·2^23`` minus 2^22: round half to even for |f| < 2^22.

    Q4_K, per sub-block of 32: weights w = sqrt(sum(x²) / 32) + |x|; make_qkx2_quants
          (nmax 15, rmin -1, rdelta 0.1, nstep 20): min = min(x, 0); start from
          iscale = 15 / (max - min); then for is = 0..20 take
          iscale = (-1 + 0.1·is + 15) / (max - min) (min being the best so far), codes
          l = clamp(nearest_int(iscale·(x - min)), 0, 15), the weighted least-squares
          scale and min for those codes (min clamped to <= 0), and keep them when their
          weighted squared error is lower. Per super-block: ls = nearest_int(63 / max_scale
          · scale), lm = nearest_int(63 / max_min · (-min)), d = fp16(max_scale / 63),
          dmin = fp16(max_min / 63); codes q = clamp(nearest_int((x + dmin·lm) / (d·ls)),
          0, 15).  value = d·ls·q - dmin·lm.
    Q6_K, per sub-block of 16: make_qx_quants(nmax 32, weights x²): max = the first value
          of largest magnitude, iscale = -(32 + 0.1·is) / max for is = 0, -9..9, codes
          clamp(nearest_int(iscale·x), -32, 31), scale = sum(w·x·l) / sum(w·l²), kept
          when sum(w·x·l)² / sum(w·l²) grows. Per super-block: max_scale = the sub-block
          scale of largest magnitude (the first on ties), iscale = -128 / max_scale,
          d = fp16(1 / iscale), sc = min(127, nearest_int(iscale · scale)); codes
          q = clamp(nearest_int(x / (d·sc)), -32, 31) + 32.  value = d·sc·(q - 32).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import labs.quant.constants as C

if TYPE_CHECKING:
    import torch

# Below this magnitude nearest_int(v) is v rounded half to even (exact up to 2^22; the
# margin covers the float32 rounding of the bound itself).
NEAREST_INT_EXACT = 2.0**21


def _f32(value: float) -> float:
    """``value`` rounded to float32 (the C code's float constants and their products)."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


# make_qkx2_quants(..., rmin = -1.f, rdelta = 0.1f, ...): numerator of step is,
# rmin + rdelta*is + nmax, each operation rounded to float32.
Q4_K_STEP_NUMERATORS = tuple(
    _f32(_f32(C.Q4_K_SEARCH_RMIN + _f32(_f32(C.Q4_K_SEARCH_RDELTA) * step)) + C.Q4_K_LEVELS)
    for step in range(C.Q4_K_SEARCH_STEPS + 1)
)
# make_qx_quants: nmax + 0.1f*is for is = -9..9 without 0, in the C loop's order.
Q6_K_STEP_NMAX = tuple(
    _f32(C.Q6_K_NMAX + _f32(_f32(C.Q6_K_SEARCH_RDELTA) * step))
    for step in range(-C.Q6_K_SEARCH_STEPS, C.Q6_K_SEARCH_STEPS + 1)
    if step != 0
)


def div_f32(num: torch.Tensor | float, den: torch.Tensor | float) -> torch.Tensor:
    """IEEE float32 division. ``scalar / tensor`` in torch is ``reciprocal(t) * scalar``,
    and on CUDA ``tensor / scalar`` multiplies by the reciprocal: both round differently
    from C's division, so constants are expanded to tensors first."""
    import torch

    if not isinstance(num, torch.Tensor):
        assert isinstance(den, torch.Tensor)
        num = torch.full_like(den, num)
    if not isinstance(den, torch.Tensor):
        den = torch.full_like(num, den)
    return torch.div(num, den)


def nearest_int(v: torch.Tensor) -> torch.Tensor:
    """C's ``nearest_int`` (int32), bit for bit: round half to even for |v| < 2^22, and
    what the bits give beyond. NaN gives 0, as C's default NaN (mantissa 0x400000) does
    on x86 and ARM; CUDA's NaN has other mantissa bits, hence the explicit mapping."""
    import torch

    shifted = torch.nan_to_num(v, nan=0.0, posinf=float("inf"), neginf=float("-inf"))
    bits = shifted.add_(C.NEAREST_INT_MAGIC).view(torch.int32)
    return bits.bitwise_and_(C.NEAREST_INT_MANTISSA_MASK).sub_(C.NEAREST_INT_OFFSET)


def _sqrtf(v: torch.Tensor) -> torch.Tensor:
    """C's correctly rounded ``sqrtf``. torch's float32 sqrt on CPU is a vectorised
    approximation that is off by one ulp for some inputs; the float64 root rounded to
    float32 is exact (double rounding cannot hurt a square root)."""
    import torch

    return torch.sqrt(v.to(torch.float64)).to(torch.float32)


def _clamped_codes(v: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """``MAX(lo, MIN(hi, nearest_int(v)))`` as float32 (exact: small integers)."""
    import torch

    return nearest_int(v).clamp_(lo, hi).to(torch.float32)


def _sequential_sum(
    terms: torch.Tensor, from_first: bool = False, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Sum over dim 0 left to right in float32, as C's ``s += t[i]`` loops do (torch's
    reductions add pairwise and round differently). ``from_first``: C starts from t[0]
    (``s = t[0]; for i >= 1``) rather than from 0 (0 + t[0] differs from t[0] only for
    -0.0). ``out``: where to accumulate (shaped like ``terms[0]``)."""
    import torch

    if from_first:
        acc = terms[0].clone() if out is None else out.copy_(terms[0])
    else:
        acc = torch.add(terms[0], 0.0, out=out) if out is not None else terms[0] + 0.0
    for term in terms[1:]:
        acc.add_(term)
    return acc


def _square(v: torch.Tensor) -> torch.Tensor:
    return v.mul_(v)


def make_qkx2_quants(
    x: torch.Tensor, exact: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q4_K's per-sub-block search, ``make_qkx2_quants(32, 15, x, av_x + |x|, L, &min,
    Laux, -1.f, 0.1f, 20, false)`` on (n, 32) float32 sub-blocks. Returns the scale (n,),
    the stored minimum ``-min`` (n,) and the codes L (n, 32) uint8.

    Each candidate runs ~12 elementwise ops on the chunk and ~70 per sub-block, into
    buffers allocated once. ``exact``: take nearest_int's bits for every code instead of
    rounding (needed only when some |iscale·(x - min)| reaches 2^21, or for non-finite
    input; the search notices and starts again so)."""
    import torch

    xt = x.t().contiguous()  # (32, n): element i of every sub-block is one row
    hi = xt.amax(dim=0)
    x_min = xt.amin(dim=0)
    if not exact and not bool(torch.isfinite(hi).all() and torch.isfinite(x_min).all()):
        return make_qkx2_quants(x, exact=True)
    sum_x2 = _sequential_sum(xt * xt)
    av_x = _sqrtf(div_f32(sum_x2, float(C.Q4_K_SUB_BLOCK)))
    w = xt.abs().add_(av_x)
    sum_w = _sequential_sum(w, from_first=True)
    sum_x = _sequential_sum(w * xt, from_first=True)
    lo = x_min.clamp(max=0.0)  # if (min > 0) min = 0
    flat = hi == lo  # max == min: codes 0, scale 0, the_min = -min
    searching = ~flat
    # The largest |iscale * (x - min)| seen: below 2^21 nearest_int is torch's round half
    # to even (flat sub-blocks give NaN here, which fmax skips: their codes are unused).
    reach = torch.zeros_like(hi)
    laux = torch.empty_like(xt)

    def levels(iscale: torch.Tensor, lo: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
        """clamp(nearest_int(iscale * (x - lo)), 0, 15), float32, into ``laux``."""
        v = torch.sub(xt, lo, out=laux).mul_(iscale)
        if exact:
            return v.copy_(_clamped_codes(v, 0, C.Q4_K_LEVELS))
        # |v| <= iscale * max(max - lo, lo - x_min)
        torch.fmax(reach, torch.maximum(span, lo - x_min).mul_(iscale), out=reach)
        return v.round_().clamp_(0, C.Q4_K_LEVELS)

    span = hi - lo
    iscale = div_f32(float(C.Q4_K_LEVELS), span)
    scale = div_f32(1.0, iscale)
    codes = levels(iscale, lo, span)
    best_error = _sequential_sum(w * _square(scale * codes + lo - xt))
    # The codes are recomputed at the end from the iscale and min that produced them.
    code_iscale, code_lo = iscale, lo
    sums = torch.empty((*xt.shape[:1], 3, *xt.shape[1:]), dtype=xt.dtype, device=xt.device)
    acc = torch.empty((3, *xt.shape[1:]), dtype=xt.dtype, device=xt.device)
    cur_error = torch.empty_like(hi)
    for numerator in Q4_K_STEP_NUMERATORS:
        span = hi - lo
        iscale = div_f32(numerator, span)
        levels(iscale, lo, span)
        wl = torch.mul(w, laux, out=sums[:, 0])
        torch.mul(wl, laux, out=sums[:, 1])
        torch.mul(wl, xt, out=sums[:, 2])
        sum_l, sum_l2, sum_xl = _sequential_sum(sums, out=acc)
        det = sum_w * sum_l2 - sum_l * sum_l
        this_scale = div_f32(sum_w * sum_xl - sum_x * sum_l, det)
        this_min = div_f32(sum_l2 * sum_x - sum_l * sum_xl, det)
        positive = this_min > 0  # then this_min = 0 and this_scale = sum_xl / sum_l2
        this_min = torch.where(positive, 0.0, this_min)
        this_scale = torch.where(positive, div_f32(sum_xl, sum_l2), this_scale)
        # diff = this_scale * l + this_min - x; mad += w * diff * diff (w·d² = d²·w).
        laux.mul_(this_scale).add_(this_min).sub_(xt)
        _sequential_sum(_square(laux).mul_(w), out=cur_error)
        better = (det > 0).logical_and_(cur_error < best_error).logical_and_(searching)
        code_iscale = torch.where(better, iscale, code_iscale)
        code_lo = torch.where(better, lo, code_lo)
        best_error = torch.where(better, cur_error, best_error)
        scale = torch.where(better, this_scale, scale)
        lo = torch.where(better, this_min, lo)
    if not exact and not bool((reach < NEAREST_INT_EXACT).all()):
        return make_qkx2_quants(x, exact=True)
    codes = torch.where(flat, 0.0, levels(code_iscale, code_lo, hi - code_lo))
    scale = torch.where(flat, 0.0, scale)
    # Contiguous here, on the chunk's thread: the pipeline concatenates the chunks.
    return scale, lo.neg(), codes.to(torch.uint8).t().contiguous()


def make_qx_quants(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q6_K's per-sub-block search, ``make_qx_quants(16, 32, x, L, 1, NULL)`` (rmse_type
    1: weights x²) on (n, 16) float32 sub-blocks. Returns the scale (n,) and the codes
    L = l + 32 (n, 16) uint8; a sub-block with amax below 1e-15 gets 0 and zeros.

    The candidates' codes depend only on their own iscale, so all 19 are evaluated in one
    batch, (16, 19, n), with one sequential sum; only the choice (is the candidate's
    sumlx²/suml2 larger than the best so far?) runs candidate by candidate, on (n,)."""
    import torch

    first = x.abs().argmax(dim=1, keepdim=True)  # the first of largest magnitude
    signed_max = x.gather(1, first)[:, 0]
    zero = signed_max.abs() < C.GROUP_MAX_EPS
    xt = x.t().contiguous()  # (16, n)
    w = xt * xt
    wx = w * xt
    # iscale = -(nmax + 0.1f*is) / max: is = 0 first, then the search order.
    nmax = torch.tensor(
        [-float(C.Q6_K_NMAX), *(-v for v in Q6_K_STEP_NMAX)], dtype=xt.dtype, device=xt.device
    )
    iscales = torch.div(nmax[:, None], signed_max)  # (19, n)

    def levels(iscale: torch.Tensor) -> torch.Tensor:
        """clamp(nearest_int(iscale * x), -32, 31) as float32, iscale broadcast against
        (16, ..., n). |iscale * x| <= nmax + 1 since |x| <= |max|: nearest_int is torch's
        round half to even, except in all-zero sub-blocks (their result is not used) and
        for non-finite input (then its bits are taken)."""
        v = xt.reshape(xt.shape[0], *([1] * (iscale.dim() - 1)), xt.shape[1]) * iscale
        if bool(torch.isfinite(signed_max).all()):
            return v.round_().clamp_(-C.Q6_K_NMAX, C.Q6_K_NMAX - 1)
        return _clamped_codes(v, -C.Q6_K_NMAX, C.Q6_K_NMAX - 1)

    lev = levels(iscales)  # (16, 19, n)
    terms = torch.empty((xt.shape[0], 2, *iscales.shape), dtype=xt.dtype, device=xt.device)
    torch.mul(wx[:, None], lev, out=terms[:, 0])  # w*x[i]*l
    torch.mul(w[:, None], lev, out=terms[:, 1]).mul_(lev)  # w*l*l
    sumlx, suml2 = _sequential_sum(terms)  # (19, n) each
    this_scale = div_f32(sumlx, suml2)
    gains = this_scale * sumlx  # best = scale * sumlx
    squares = sumlx * sumlx
    # is = 0: scale = suml2 ? sumlx/suml2 : 0; best = scale * sumlx.
    nonzero = suml2[0] != 0
    scale = torch.where(nonzero, this_scale[0], 0.0)
    best = scale * sumlx[0]
    chosen = torch.zeros_like(signed_max, dtype=torch.int64)
    # One unbind per tensor: indexing a row costs as much as an op on it.
    rows = zip(
        (suml2 > 0).unbind(0),
        squares.unbind(0),
        suml2.unbind(0),
        this_scale.unbind(0),
        gains.unbind(0),
        strict=True,
    )
    for k, (positive, square, l2, candidate_scale, gain) in enumerate(rows):
        if k == 0:
            continue
        better = positive.logical_and_(square > best * l2)
        chosen = torch.where(better, k, chosen)
        scale = torch.where(better, candidate_scale, scale)
        best = torch.where(better, gain, best)
    codes = levels(iscales.gather(0, chosen[None])[0]).add_(C.Q6_K_NMAX)
    scale = torch.where(zero, 0.0, scale)
    codes = torch.where(zero, 0.0, codes)
    return scale, codes.to(torch.uint8).t().contiguous()


# --- super-blocks ------------------------------------------------------------------------
