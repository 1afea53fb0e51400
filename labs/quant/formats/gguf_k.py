"""GGUF's k-quants q4_k and q6_k, bit-exact with llama.cpp's reference quantizers.

Reference: llama.cpp ``ggml/src/ggml-quants.c`` ``quantize_row_q4_K_ref`` and
``quantize_row_q6_K_ref`` (what ``quantize_q4_K`` / ``quantize_q6_K`` run without an
importance matrix), their helpers ``nearest_int``, ``make_qkx2_quants`` and
``make_qx_quants``, and the block structs of ``ggml/src/ggml-common.h``. Both formats
cut a row into super-blocks of QK_K = 256 values (gguf-py ``GGML_QUANT_SIZES``):

    Q4_K: (256, 2 + 2 + 12 + 128)  fp16 d, fp16 dmin, the 8 sub-blocks' 6-bit scales and
                                   6-bit mins packed in 12 bytes, then 128 bytes of
                                   nibbles: byte 32i + l holds element 64i + l (low) and
                                   64i + 32 + l (high)                       4.5 bits/value
    Q6_K: (256, 128 + 64 + 16 + 2) ql: low nibbles, qh: high 2 bits, the 16 sub-blocks'
                                   int8 scales, fp16 d                   6.5625 bits/value

Arithmetic, in float32 in the C code's order: sums accumulated left to right as its loops
do, divisions and ``sqrtf`` correctly rounded (torch's ``scalar / tensor`` and its float32
CPU ``sqrt`` are not, hence ``_div`` and ``_sqrtf``). ``nearest_int(f)`` is the low 23
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

A sub-block whose effective scale d·ls (d·sc) is 0 keeps the codes its search found, as
in C; a Q6_K super-block whose largest sub-block scale is below 1e-15 is all zero bytes.

Layout in this library: ``layout.block_len`` is the sub-block (32 or 16 values, one
effective scale and offset each: ``scale_offset``, ``affine`` and the metrics work per
sub-block), ``block_size`` is QK_K (256, the unit of storage). A row whose length is not
a multiple of the sub-block is padded by repeating its last value, like every format; if
it is not a multiple of 256, its last super-block is completed in ``to_bytes`` with
all-zero sub-blocks. Those change no super-block statistic (their scale and min are 0),
so when the row length is a multiple of the sub-block the stored super-block is exactly
what llama.cpp makes of the row padded with zeros, and gguf-py's dequantizer reads it back
(zeros in the completed part); a partial sub-block holds the repeated last value instead.

Deliberate differences: a non-finite value makes its whole super-block NaN with
``nonfinite="propagate"`` (C's comparisons skip NaN and its casts are undefined); an fp16
overflow of d or dmin raises ValueError (with ``nonfinite="propagate"`` its super-block
is NaN); rows that are not a multiple of 256 are padded
(GGUF refuses them). Every float32 operation is rounded separately, as in llama.cpp's
x86-64 build of ggml-base (compiled without FMA; the tests hold digests of that C code's
bytes). A build that contracts a·b + c into an FMA (gcc -march=native, clang on arm64)
can end a search step differently and store other scales and codes for some sub-blocks.
"""

from __future__ import annotations

import struct
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar

from labs.quant import constants as C
from labs.quant.blockops import block_absmax
from labs.quant.core import Layout
from labs.quant.formats.gguf import GGUFFormat, _fp16_bytes
from labs.quant.parallel import cpu_workers, map_chunks

if TYPE_CHECKING:
    import torch

KERNEL: ModuleType | None
try:  # the native quantizer (_kquants.c), built by the install where a C compiler is
    from labs.quant import _kquants as KERNEL
except ImportError:  # pragma: no cover - depends on the build
    KERNEL = None
# Values per native call: enough that a call's overhead is nothing, small enough that
# the calls spread over every thread (labs.quant.parallel) and end together.
NATIVE_CHUNK_VALUES = 1 << 18

# Sub-blocks per (padded) row, recorded in the tensor's fields: ``block_scales`` and
# ``pack`` group sub-blocks into super-blocks row by row.
PER_ROW_FIELD = "sub_blocks_per_row"
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


def _div(num: torch.Tensor | float, den: torch.Tensor | float) -> torch.Tensor:
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


def _nearest_int(v: torch.Tensor) -> torch.Tensor:
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

    return _nearest_int(v).clamp_(lo, hi).to(torch.float32)


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
    av_x = _sqrtf(_div(sum_x2, float(C.Q4_K_SUB_BLOCK)))
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
    iscale = _div(float(C.Q4_K_LEVELS), span)
    scale = _div(1.0, iscale)
    codes = levels(iscale, lo, span)
    best_error = _sequential_sum(w * _square(scale * codes + lo - xt))
    # The codes are recomputed at the end from the iscale and min that produced them.
    code_iscale, code_lo = iscale, lo
    sums = torch.empty((*xt.shape[:1], 3, *xt.shape[1:]), dtype=xt.dtype, device=xt.device)
    acc = torch.empty((3, *xt.shape[1:]), dtype=xt.dtype, device=xt.device)
    cur_error = torch.empty_like(hi)
    for numerator in Q4_K_STEP_NUMERATORS:
        span = hi - lo
        iscale = _div(numerator, span)
        levels(iscale, lo, span)
        wl = torch.mul(w, laux, out=sums[:, 0])
        torch.mul(wl, laux, out=sums[:, 1])
        torch.mul(wl, xt, out=sums[:, 2])
        sum_l, sum_l2, sum_xl = _sequential_sum(sums, out=acc)
        det = sum_w * sum_l2 - sum_l * sum_l
        this_scale = _div(sum_w * sum_xl - sum_x * sum_l, det)
        this_min = _div(sum_l2 * sum_x - sum_l * sum_xl, det)
        positive = this_min > 0  # then this_min = 0 and this_scale = sum_xl / sum_l2
        this_min = torch.where(positive, 0.0, this_min)
        this_scale = torch.where(positive, _div(sum_xl, sum_l2), this_scale)
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
    this_scale = _div(sumlx, suml2)
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


def _to_super(values: torch.Tensor, per_row: int, group: int) -> torch.Tensor:
    """Per-sub-block values (n_rows · per_row, ...) on the super-block grid (n_super,
    group, ...): each row's last super-block is completed with zeros (a zero sub-block:
    scale, min and codes 0)."""
    import torch

    tail = tuple(values.shape[1:])
    rows = values.reshape(-1, per_row, *tail)
    missing = -per_row % group
    if missing:
        rows = torch.cat([rows, rows.new_zeros((rows.shape[0], missing, *tail))], dim=1)
    return rows.reshape(-1, group, *tail)


def _from_super(grid: torch.Tensor, per_row: int) -> torch.Tensor:
    """(n_super, group, ...) back to the real sub-blocks (n_rows · per_row, ...)."""
    group = grid.shape[1]
    tail = tuple(grid.shape[2:])
    rows = grid.reshape(-1, -(-per_row // group) * group, *tail)
    return rows[:, :per_row].reshape(-1, *tail)


def _per_row(tensor: Mapping[str, torch.Tensor]) -> int:
    return int(tensor[PER_ROW_FIELD])


def _nonfinite_super(amax: torch.Tensor) -> torch.Tensor:
    """Per super-block (rows of ``amax``): does it hold a NaN or Inf? (amax propagates
    NaN.)"""
    import torch

    return ~torch.isfinite(amax.amax(dim=1))


@dataclass(frozen=True)
class KQuantFormat(GGUFFormat):
    """Shared by q4_k and q6_k: super-blocks of 256 made of sub-blocks."""

    # The search runs ~100 small ops per candidate scale and chunk: bigger chunks pay less
    # per-op overhead (labs.quant.core._chunk_blocks: one thread's chunk).
    chunk_factor: ClassVar[float] = 2

    @property
    def sub_block(self) -> int:
        """Elements per sub-block: one effective scale each."""
        sub_block = self.spec.sub_block_size
        assert sub_block is not None
        return sub_block

    @property
    def sub_blocks(self) -> int:
        return C.QK_K // self.sub_block

    def tensor_fields(
        self, x_blocks: torch.Tensor, stats: Mapping[str, torch.Tensor], layout: Layout
    ) -> dict[str, torch.Tensor]:
        import torch

        per_row = layout.padded_row_len // layout.block_len
        return {PER_ROW_FIELD: torch.tensor(per_row, dtype=torch.int64)}

    # --- the native kernel (labs/quant/_kquants.c) ---------------------------------------

    @abstractmethod
    def native_fields(self, n_super: int) -> dict[str, torch.Tensor]:
        """Empty field tensors for ``n_super`` super-blocks, in the kernel's order."""

    def native_quantize(
        self, x_rows: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]] | None:
        """The whole quantizer in C on the CPU, cut into row ranges that run on parallel
        threads (the kernel releases the GIL). None, and the torch pipeline runs, when the
        kernel is not built, on another device, or when a chunk holds a non-finite value
        or overflows an fp16 scale (the torch pipeline applies ``nonfinite=``)."""
        import torch

        if KERNEL is None or x_rows.device.type != "cpu":
            return None
        rows = x_rows.to(torch.float32).contiguous()
        n_rows, row_len = rows.shape
        per_row = row_len // self.sub_block
        supers = -(-per_row // self.sub_blocks)
        flat = rows.reshape(-1)
        codes = torch.empty((n_rows * per_row, self.sub_block), dtype=torch.uint8)
        flat_codes = codes.reshape(-1)
        fields = self.native_fields(n_rows * supers)
        kernel = getattr(KERNEL, self.key)

        def run(segment: tuple[int, int, int, int]) -> int:
            start, seg_rows, seg_len, first_super = segment
            stop, seg_supers = start + seg_rows * seg_len, seg_rows * -(-seg_len // C.QK_K)
            outputs = [f[first_super : first_super + seg_supers].numpy() for f in fields.values()]
            status: int = kernel(
                flat[start:stop].numpy(),
                seg_rows,
                seg_len,
                flat_codes[start:stop].numpy(),
                *outputs,
            )
            return status

        if any(map_chunks(run, _segments(n_rows, row_len))):
            return None
        return codes, fields, {PER_ROW_FIELD: torch.tensor(per_row, dtype=torch.int64)}

    @abstractmethod
    def effective(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per sub-block (real ones, row-major): the float32 scale d·sub_scale and the
        offset (None when zero), computed as llama.cpp's dequantize_row_* does."""

    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """The effective scale of every sub-block: fp16 d times its sub-block scale."""
        return self.effective(fields, tensor)[0]

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        grid = _to_super(codes, _per_row(tensor), self.sub_blocks)
        return self.pack_super_blocks(grid.reshape(-1, C.QK_K), fields).reshape(-1)

    @abstractmethod
    def pack_super_blocks(
        self, codes: torch.Tensor, fields: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """(n_super, 256) codes and the fields to (n_super, bytes per block) bytes."""


def _segments(n_rows: int, row_len: int) -> list[tuple[int, int, int, int]]:
    """Independent pieces of the rows for the kernel, as (first value, rows, row length,
    first super-block). A row is a run of super-blocks, its last one maybe partial: rows
    of whole super-blocks are cut at any super-block, other rows at row boundaries, and a
    single such row into its whole super-blocks and the partial rest."""
    per_chunk = max(1, NATIVE_CHUNK_VALUES // C.QK_K)
    if row_len % C.QK_K == 0 or n_rows == 1:
        whole = n_rows * row_len // C.QK_K if row_len % C.QK_K == 0 else row_len // C.QK_K
        pieces = [
            (s * C.QK_K, min(per_chunk, whole - s), C.QK_K, s) for s in range(0, whole, per_chunk)
        ]
        rest = n_rows * row_len - whole * C.QK_K
        if rest:
            pieces.append((whole * C.QK_K, 1, rest, whole))
        return pieces
    supers = -(-row_len // C.QK_K)
    rows_per = max(1, NATIVE_CHUNK_VALUES // row_len)
    if n_rows < rows_per * cpu_workers():  # spread what there is over the threads
        rows_per = max(1, -(-n_rows // cpu_workers()))
    return [
        (r * row_len, min(rows_per, n_rows - r), row_len, r * supers)
        for r in range(0, n_rows, rows_per)
    ]


@dataclass(frozen=True)
class Q4_K(KQuantFormat, key="q4_k"):
    def native_fields(self, n_super: int) -> dict[str, torch.Tensor]:
        import torch

        return {
            "scale_fp16": torch.empty(n_super, dtype=torch.float16),
            "min_fp16": torch.empty(n_super, dtype=torch.float16),
            "sub_scale_u6": torch.empty((n_super, self.sub_blocks), dtype=torch.uint8),
            "sub_min_u6": torch.empty((n_super, self.sub_blocks), dtype=torch.uint8),
        }

    def block_stats(self, x_hp: torch.Tensor) -> dict[str, torch.Tensor]:
        scale, the_min, codes = make_qkx2_quants(x_hp)
        return {"amax": block_absmax(x_hp), "scale": scale, "min": the_min, "codes": codes}

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        import torch

        per_row, group = _per_row(tensor), self.sub_blocks
        scales = _to_super(stats["scale"], per_row, group)
        mins = _to_super(stats["min"], per_row, group)
        # float max_scale = 0; if (scale > max_scale) ...: the largest positive scale, +0
        # when there is none (the stored mins are -min, often -0.0; clamp would keep it).
        max_scale = torch.where(scales > 0, scales, 0.0).amax(dim=1)
        max_min = torch.where(mins > 0, mins, 0.0).amax(dim=1)
        inv_scale = torch.where(max_scale > 0, _div(float(C.K_SCALE_LEVELS), max_scale), 0.0)
        inv_min = torch.where(max_min > 0, _div(float(C.K_SCALE_LEVELS), max_min), 0.0)
        # uint8_t ls = nearest_int(...); ls = MIN(63, ls): the cast wraps, then the clamp.
        ls = _sub_scale(inv_scale[:, None] * scales)
        lm = _sub_scale(inv_min[:, None] * mins)
        d = _div(max_scale, float(C.K_SCALE_LEVELS))
        d = torch.where(_nonfinite_super(_to_super(stats["amax"], per_row, group)), torch.nan, d)
        d16 = d.to(torch.float16)
        dmin16 = _div(max_min, float(C.K_SCALE_LEVELS)).to(torch.float16)
        fields = {"scale_fp16": d16, "min_fp16": dmin16, "sub_scale_u6": ls, "sub_min_u6": lm}
        scale, offset = self.effective(fields, tensor)
        assert offset is not None
        return fields, {"d": scale, "dm": offset.neg(), "fallback": stats["codes"]}

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        d, dm = params["d"][:, None], params["dm"][:, None]
        codes = _nearest_int(_div(x_hp + dm, d)).clamp_(0, C.Q4_K_LEVELS).to(torch.uint8)
        return torch.where(d != 0, codes, params["fallback"])  # if (!d) continue;

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        import torch

        return codes.to(torch.float32)

    def effective(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """d·ls and -(dmin·lm): value = d·ls·q - dmin·lm as in dequantize_row_q4_K."""
        import torch

        per_row = _per_row(tensor)
        d = fields["scale_fp16"].to(torch.float32)[:, None] * fields["sub_scale_u6"]
        m = fields["min_fp16"].to(torch.float32)[:, None] * fields["sub_min_u6"]
        return _from_super(d, per_row), _from_super(m, per_row).neg()

    def decode_zero_points(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor | None:
        """Each sub-block's minimum, -(dmin·lm) (the value of code 0)."""
        return self.effective(fields, tensor)[1]

    def pack_super_blocks(
        self, codes: torch.Tensor, fields: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        import torch

        ls, lm = fields["sub_scale_u6"], fields["sub_min_u6"]
        # Bytes 0-3: ls[0..3] with bits 4-5 of ls[4..7] on top; bytes 4-7: the same for the
        # mins; bytes 8-11: the low nibbles of ls[4..7] and lm[4..7] (get_scale_min_k4).
        half = self.sub_blocks // 2
        scales = torch.cat(
            [
                ls[:, :half] | ((ls[:, half:] >> C.NIBBLE_BITS) << C.K_SCALE_BITS),
                lm[:, :half] | ((lm[:, half:] >> C.NIBBLE_BITS) << C.K_SCALE_BITS),
                (ls[:, half:] & C.NIBBLE_MASK) | ((lm[:, half:] & C.NIBBLE_MASK) << C.NIBBLE_BITS),
            ],
            dim=1,
        )
        pairs = codes.reshape(-1, half, 2, self.sub_block)  # sub-blocks 2i and 2i + 1
        qs = (pairs[:, :, 0] | (pairs[:, :, 1] << C.NIBBLE_BITS)).reshape(-1, C.QK_K // 2)
        header = [_fp16_bytes(fields["scale_fp16"]), _fp16_bytes(fields["min_fp16"])]
        return torch.cat([*header, scales, qs], dim=1)


def _sub_scale(v: torch.Tensor) -> torch.Tensor:
    """``uint8_t l = nearest_int(v); l = MIN(63, l)`` as uint8."""
    import torch

    return _nearest_int(v).bitwise_and_(C.UINT8_MASK).clamp_(max=C.K_SCALE_LEVELS).to(torch.uint8)


@dataclass(frozen=True)
class Q6_K(KQuantFormat, key="q6_k"):
    # The batched search holds 19 candidates' codes and terms at once: the usual chunk
    # (64 Ki elements) measured as fast as a quarter of it and as half of it.
    chunk_factor: ClassVar[float] = 1

    def native_fields(self, n_super: int) -> dict[str, torch.Tensor]:
        import torch

        return {
            "scale_fp16": torch.empty(n_super, dtype=torch.float16),
            "sub_scale_i8": torch.empty((n_super, self.sub_blocks), dtype=torch.int8),
        }

    def block_stats(self, x_hp: torch.Tensor) -> dict[str, torch.Tensor]:
        scale, codes = make_qx_quants(x_hp)
        return {"amax": block_absmax(x_hp), "scale": scale, "codes": codes}

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        import torch

        per_row, group = _per_row(tensor), self.sub_blocks
        scales = _to_super(stats["scale"], per_row, group)
        first = scales.abs().argmax(dim=1, keepdim=True)  # strict >: the first largest
        max_scale = scales.gather(1, first)[:, 0]
        zero = max_scale.abs() < C.GROUP_MAX_EPS  # memset(&y[i], 0, sizeof(block_q6_K))
        iscale = _div(float(C.Q6_K_SCALE_MIN), max_scale)
        d = torch.where(zero, 0.0, _div(1.0, iscale))
        d = torch.where(_nonfinite_super(_to_super(stats["amax"], per_row, group)), torch.nan, d)
        # int8_t scales[ib] = MIN(127, nearest_int(iscale * scale)): in [-128, 127].
        sc = _nearest_int(iscale[:, None] * scales).clamp_(max=C.Q6_K_SCALE_MAX)
        sc = torch.where(zero[:, None], 0, sc).to(torch.int8)
        fields = {"scale_fp16": d.to(torch.float16), "sub_scale_i8": sc}
        fallback = _to_super(stats["codes"], per_row, group)
        fallback = _from_super(torch.where(zero[:, None, None], 0, fallback), per_row)
        return fields, {"d": self.effective(fields, tensor)[0], "fallback": fallback}

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        d = params["d"][:, None]
        levels = _nearest_int(_div(x_hp, d)).clamp_(-C.Q6_K_NMAX, C.Q6_K_NMAX - 1)
        codes = levels.add_(C.Q6_K_NMAX).to(torch.uint8)
        return torch.where(d != 0, codes, params["fallback"])  # if (!d) continue;

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        import torch

        return codes.to(torch.float32).sub_(C.Q6_K_NMAX)

    def effective(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """d·sc: value = d·sc·(q - 32) as in dequantize_row_q6_K."""
        import torch

        d = fields["scale_fp16"].to(torch.float32)[:, None] * fields["sub_scale_i8"]
        return _from_super(d, _per_row(tensor)), None

    def pack_super_blocks(
        self, codes: torch.Tensor, fields: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """Each half of 128 values is 4 quarters of 32: ql[l] holds the low nibbles of
        quarters 0 (low) and 2 (high) at l, ql[32 + l] those of quarters 1 and 3, and
        qh[l] the two high bits of quarters 0..3 in bits 0-1, 2-3, 4-5, 6-7."""
        import torch

        quarters = codes.reshape(-1, 2, 4, C.QK_K // 8)
        low = quarters & C.NIBBLE_MASK
        ql = torch.cat(
            [
                low[:, :, 0] | (low[:, :, 2] << C.NIBBLE_BITS),
                low[:, :, 1] | (low[:, :, 3] << C.NIBBLE_BITS),
            ],
            dim=2,
        )
        high = quarters >> C.NIBBLE_BITS
        qh = high[:, :, 0]
        for k in range(1, 4):
            qh = qh | (high[:, :, k] << (C.Q6_K_HIGH_BITS * k))
        scales = fields["sub_scale_i8"].view(torch.uint8)
        ql, qh = ql.reshape(-1, C.QK_K // 2), qh.reshape(-1, C.QK_K // 4)
        return torch.cat([ql, qh, scales, _fp16_bytes(fields["scale_fp16"])], dim=1)
