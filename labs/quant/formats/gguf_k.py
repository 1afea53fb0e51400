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

Arithmetic: see ``labs.quant.formats.kquant_search`` (llama.cpp's float32 order, exactly
rounded divisions and ``sqrtf``, ``nearest_int``).

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

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar

import labs.quant.constants as C
from labs.quant.blockops import block_absmax
from labs.quant.formats.gguf import GGUFFormat, _fp16_bytes
from labs.quant.formats.kquant_search import (
    div_f32,
    make_qkx2_quants,
    make_qx_quants,
    nearest_int,
)
from labs.quant.layout import Layout
from labs.quant.parallel import cpu_workers, map_chunks

if TYPE_CHECKING:
    import torch

KERNEL: ModuleType | None
try:  # the native quantizer (_kquants.c), built by the install where a C compiler is
    import labs.quant._kquants as KERNEL
except ImportError:  # pragma: no cover - depends on the build
    KERNEL = None
# Values per native call: enough that a call's overhead is nothing, small enough that
# the calls spread over every thread (labs.quant.parallel) and end together.
NATIVE_CHUNK_VALUES = 1 << 18

# Sub-blocks per (padded) row, recorded in the tensor's fields: ``block_scales`` and
# ``pack`` group sub-blocks into super-blocks row by row.
PER_ROW_FIELD = "sub_blocks_per_row"


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
        inv_scale = torch.where(max_scale > 0, div_f32(float(C.K_SCALE_LEVELS), max_scale), 0.0)
        inv_min = torch.where(max_min > 0, div_f32(float(C.K_SCALE_LEVELS), max_min), 0.0)
        # uint8_t ls = nearest_int(...); ls = MIN(63, ls): the cast wraps, then the clamp.
        ls = _sub_scale(inv_scale[:, None] * scales)
        lm = _sub_scale(inv_min[:, None] * mins)
        d = div_f32(max_scale, float(C.K_SCALE_LEVELS))
        d = torch.where(_nonfinite_super(_to_super(stats["amax"], per_row, group)), torch.nan, d)
        d16 = d.to(torch.float16)
        dmin16 = div_f32(max_min, float(C.K_SCALE_LEVELS)).to(torch.float16)
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
        codes = nearest_int(div_f32(x_hp + dm, d)).clamp_(0, C.Q4_K_LEVELS).to(torch.uint8)
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

    return nearest_int(v).bitwise_and_(C.UINT8_MASK).clamp_(max=C.K_SCALE_LEVELS).to(torch.uint8)


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
        iscale = div_f32(float(C.Q6_K_SCALE_MIN), max_scale)
        d = torch.where(zero, 0.0, div_f32(1.0, iscale))
        d = torch.where(_nonfinite_super(_to_super(stats["amax"], per_row, group)), torch.nan, d)
        # int8_t scales[ib] = MIN(127, nearest_int(iscale * scale)): in [-128, 127].
        sc = nearest_int(iscale[:, None] * scales).clamp_(max=C.Q6_K_SCALE_MAX)
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
        levels = nearest_int(div_f32(x_hp, d)).clamp_(-C.Q6_K_NMAX, C.Q6_K_NMAX - 1)
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
