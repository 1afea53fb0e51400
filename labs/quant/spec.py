"""The table of formats: every labs.quant format's key, block and stored bits, torch-free.

One row per format, in display order. The format classes derive their sizes from it
(``block_size``, ``bits_per_value``, ``nbytes``), ``labs.catalog.memory`` prices checkpoints with
it, the labs offer its keys, and the tables in README.md and docs/quant.md are rendered
from it (``labs.quant.spec_table``, checked by a test row by row). A new format is one row here, one class in ``labs/quant/formats``
and its tests (docs/quant.md, "Adding a format").

A row counts stored bits by role, as arithmetic on named sizes, in the spirit of gguf-py's
``GGML_QUANT_SIZES`` (``Q4_0: (32, 2 + 16)``: a block of 32 values is an fp16 scale plus
16 bytes of nibbles). ``block_bytes`` gives that pair back, and a test compares the GGUF
rows with gguf-py's. Sources, per row: see ``reference`` and labs/quant/constants.py.

Importing this module imports no torch (and nothing but labs.quant.constants), so the web
process and the budget labs can read it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

import labs.quant.constants as C

FP32_BITS = C.FP32_BYTES * C.BITS_PER_BYTE
FP16_BITS = C.FP16_BYTES * C.BITS_PER_BYTE
E8M0_BITS = C.E8M0_BYTES * C.BITS_PER_BYTE
E4M3_BITS = C.E4M3_BYTES * C.BITS_PER_BYTE
INT8_BITS = C.BITS_PER_BYTE
INT4_BITS = C.NIBBLE_BITS
INT4_DEFAULT_GROUP = 128  # the group size GPTQ, AWQ and torchao default to
Q6_K_SCALE_BITS = C.BITS_PER_BYTE  # q6_K's sub-block scales are int8


class FormatKey(StrEnum):
    """Every labs.quant format key, in display order: integers, float8, MX, NVFP4, NF4,
    GGUF. A str: ``FormatKey.NVFP4 == "nvfp4"``. A lab that offers some formats lists
    them as ``Literal[FormatKey.INT8, ...]``."""

    INT8 = "int8"
    INT4 = "int4"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    MXFP8_E4M3 = "mxfp8_e4m3"
    MXFP8_E5M2 = "mxfp8_e5m2"
    MXFP6_E2M3 = "mxfp6_e2m3"
    MXFP6_E3M2 = "mxfp6_e3m2"
    MXFP4 = "mxfp4"
    NVFP4 = "nvfp4"
    NF4 = "nf4"
    Q8_0 = "q8_0"
    Q4_0 = "q4_0"
    Q4_1 = "q4_1"
    Q4_K = "q4_k"
    Q6_K = "q6_k"

    def __repr__(self) -> str:
        # The key as written, so that messages listing keys (pydantic's "Input should be
        # 'int8' or 'int4'") read the same as for plain strings.
        return repr(self.value)


def _ceil_div(num: int, den: int) -> int:
    return -(-num // den)


@dataclass(frozen=True, kw_only=True)
class FormatSpec:
    """How one format (in one configuration) stores a tensor.

    ``block_size`` values share ``scale_bits`` of scales and ``zero_point_bits`` of zero
    points or minimums; ``block_size=None`` means they are stored once per row when
    ``scale_bits`` is set, else only per tensor. ``tensor_scale_bits`` are stored once
    per tensor. ``sub_block_size``: the k-quants' unit of one effective scale inside a
    block. ``scales_block``: QLoRA double quantization, a ``scales_block_bits`` scale per
    that many block scales. ``flat``: blocks cut the flattened tensor, not each row.
    Element values (before scaling) lie in [``element_min``, ``element_max``].
    """

    key: str
    block_size: int | None
    sub_block_size: int | None = None
    flat: bool = False
    element: str  # the element type, for docs and labs: "E2M1", "int4", ...
    element_bits: int
    element_min: float
    element_max: float
    scale_type: str  # the stored scale type: "E8M0", "fp16", ...
    scale_bits: int
    zero_point_bits: int = 0
    tensor_scale_bits: int = 0
    scales_block: int | None = None
    scales_block_bits: int = 0
    scale_max: float | None = None  # the largest stored block scale, where it is narrow
    reference: str  # what the implementation matches
    options: str = ""  # what the format's options change, for the docs table

    @classmethod
    def dtype(cls, key: str, bits: int) -> FormatSpec:
        """A plain dtype (fp32, bf16, ...) as a row: every element stored, no scales."""
        return cls(
            key=key,
            block_size=None,
            element=key,
            element_bits=bits,
            element_min=-math.inf,
            element_max=math.inf,
            scale_type="none",
            scale_bits=0,
            reference="plain dtype",
        )

    @property
    def scale_scope(self) -> str:
        """Where one scale applies: "block", "channel" (one row) or "tensor"."""
        if self.block_size is not None:
            return "block"
        return "channel" if self.scale_bits else "tensor"

    @property
    def two_level(self) -> bool:
        """Scales per block or row under one more per tensor (NVFP4's FP32 over its E4M3
        block scales): a block's bits then depend on the whole tensor's amax."""
        return self.scale_scope != "tensor" and self.tensor_scale_bits > 0

    @property
    def bits_per_value(self) -> float:
        """Stored bits per element: element bits plus per-block scales and zero points.
        Values stored per row or per tensor depend on the shape and are left out."""
        block = self.block_size
        if block is None:
            return float(self.element_bits)
        shared = self.scales_block_bits / self.scales_block if self.scales_block else 0
        # Each part divided on its own: the sum is then exact for every power-of-two block.
        return self.element_bits + (
            self.scale_bits / block + self.zero_point_bits / block + shared / block
        )

    @property
    def block_bytes(self) -> tuple[int, int] | None:
        """gguf-py's ``(block size, bytes per block)``; None without a fixed block or
        when blocks share second-level scales."""
        if self.block_size is None or self.scales_block:
            return None
        bits = self.block_size * self.element_bits + self.scale_bits + self.zero_point_bits
        return self.block_size, _ceil_div(bits, C.BITS_PER_BYTE)

    @property
    def block_bytes_text(self) -> str:
        """Bytes per block as a sum: scales + zero points + elements ("2 + 16" for q4_0),
        or "" when ``block_bytes`` is None."""
        if self.block_bytes is None:
            return ""
        assert self.block_size is not None
        parts = (self.scale_bits, self.zero_point_bits, self.block_size * self.element_bits)
        return " + ".join(f"{bits / C.BITS_PER_BYTE:g}" for bits in parts if bits)

    def _groups(self, n_rows: int, row_len: int) -> tuple[int, int]:
        """Stored elements (padding included) and scale groups of an (n_rows, row_len)
        tensor (flat formats: one row of every element)."""
        if self.block_size is not None:
            per_row = _ceil_div(row_len, self.block_size)
            return n_rows * per_row * self.block_size, n_rows * per_row
        return n_rows * row_len, n_rows if self.scale_bits or self.zero_point_bits else 0

    def payload_bytes(self, n_rows: int, row_len: int) -> int:
        """Bytes of element codes alone, padding included."""
        stored, _ = self._groups(n_rows, row_len)
        return _ceil_div(stored * self.element_bits, C.BITS_PER_BYTE)

    def storage_bytes(self, n_rows: int, row_len: int) -> int:
        """Every stored byte of an (n_rows, row_len) tensor: codes, block or row scales,
        zero points, second-level scales and per-tensor values, each byte-aligned; the
        last block of each row is padded to a whole block."""
        _, groups = self._groups(n_rows, row_len)
        total = self.payload_bytes(n_rows, row_len)
        total += _ceil_div(groups * self.scale_bits, C.BITS_PER_BYTE)
        total += _ceil_div(groups * self.zero_point_bits, C.BITS_PER_BYTE)
        if self.scales_block:
            n_second = _ceil_div(groups, self.scales_block)
            total += _ceil_div(n_second * self.scales_block_bits, C.BITS_PER_BYTE)
        return total + _ceil_div(self.tensor_scale_bits, C.BITS_PER_BYTE)

    def replace(self, **changes: object) -> FormatSpec:
        """This row with some fields changed (a configuration of the format)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_granularity(
        self,
        granularity: str | int,
        scale_bits: int,
        scale_type: str,
        zero_point_bits: int = 0,
    ) -> FormatSpec:
        """This row with one ``scale_bits`` scale (and zero point) per tensor
        (``"tensor"``), per row (``"channel"``) or per block of ``granularity`` values.
        With zero points the grid is asymmetric: unsigned codes 0 .. 2**element_bits - 1.
        Cached: a format asks for its row several times in every ``quantize`` call."""
        return _with_granularity(self, granularity, scale_bits, scale_type, zero_point_bits)


@functools.cache
def _with_granularity(
    row: FormatSpec, granularity: str | int, scale_bits: int, scale_type: str, zero_point_bits: int
) -> FormatSpec:
    if zero_point_bits:
        row = row.replace(element_min=0, element_max=(1 << row.element_bits) - 1)
    if granularity == "tensor":
        return row.replace(
            block_size=None,
            scale_bits=0,
            zero_point_bits=0,
            tensor_scale_bits=scale_bits + zero_point_bits,
            scale_type=scale_type,
        )
    return row.replace(
        block_size=None if granularity == "channel" else granularity,
        scale_bits=scale_bits,
        zero_point_bits=zero_point_bits,
        tensor_scale_bits=0,
        scale_type=scale_type,
    )


_AFFINE = (
    "absmax / min-max affine quantization as in torchao quantize_affine and PyTorch "
    "observers (round half to even)"
)
_GRANULAR_OPTIONS = "granularity: tensor, channel (row) or a block size"
_INTEGER_OPTIONS = f"{_GRANULAR_OPTIONS}; zero_point; scale_dtype fp16"
_OFP8 = "OFP8 rev 1.0 elements; torch float8 casts after clamping (bit-identical)"
_MX = "OCP MX v1.0; bit-exact with torchao prototype.mx_formats to_mx"
_MX_OPTIONS = "scale_rounding: floor (OCP) or rceil (NVIDIA)"
_GGUF = "llama.cpp quantize_row_*_ref; bit-exact with gguf-py quants.py"
_K_QUANT = (
    "llama.cpp quantize_row_q*_K_ref (no importance matrix), bit for bit; layout "
    "read back by gguf-py's dequantizer"
)


def _mx(key: FormatKey, element: str, element_bits: int, max_normal: float) -> FormatSpec:
    """OCP MX v1.0 section 5: k = 32 elements share one E8M0 scale (mxfp4: (32, 1 + 16))."""
    return FormatSpec(
        key=key,
        block_size=C.MX_BLOCK_SIZE,
        element=element,
        element_bits=element_bits,
        element_min=-max_normal,
        element_max=max_normal,
        scale_type="E8M0",
        scale_bits=E8M0_BITS,
        reference=_MX,
        options=_MX_OPTIONS,
    )


# q4_K's 8 sub-blocks of 32 and q6_K's 16 sub-blocks of 16 per super-block of QK_K.
Q4_K_SUB_BLOCKS = C.QK_K // C.Q4_K_SUB_BLOCK
Q6_K_SUB_BLOCKS = C.QK_K // C.Q6_K_SUB_BLOCK

_ROWS = (
    # Per row by default: (out, in) weights get one fp32 scale per output channel.
    FormatSpec(
        key=FormatKey.INT8, block_size=None,
        element="int8", element_bits=INT8_BITS,
        element_min=-C.INT8_SYMMETRIC_MAX, element_max=C.INT8_SYMMETRIC_MAX,
        scale_type="fp32", scale_bits=FP32_BITS,
        reference=_AFFINE, options=_INTEGER_OPTIONS,
    ),
    # (128, 4 + 64): an fp32 scale and 64 bytes of nibbles per group of 128.
    FormatSpec(
        key=FormatKey.INT4, block_size=INT4_DEFAULT_GROUP,
        element="int4", element_bits=INT4_BITS,
        element_min=-C.INT4_SYMMETRIC_MAX, element_max=C.INT4_SYMMETRIC_MAX,
        scale_type="fp32", scale_bits=FP32_BITS,
        reference=_AFFINE, options=_INTEGER_OPTIONS,
    ),
    FormatSpec(
        key=FormatKey.FP8_E4M3, block_size=None,
        element="E4M3", element_bits=C.F8_BITS,
        element_min=-C.F8_E4M3_MAX, element_max=C.F8_E4M3_MAX,
        scale_type="fp32", scale_bits=0, tensor_scale_bits=FP32_BITS,  # one per tensor
        reference=_OFP8, options=_GRANULAR_OPTIONS,
    ),
    FormatSpec(
        key=FormatKey.FP8_E5M2, block_size=None,
        element="E5M2", element_bits=C.F8_BITS,
        element_min=-C.F8_E5M2_MAX, element_max=C.F8_E5M2_MAX,
        scale_type="fp32", scale_bits=0, tensor_scale_bits=FP32_BITS,  # one per tensor
        reference=_OFP8, options=_GRANULAR_OPTIONS,
    ),
    _mx(FormatKey.MXFP8_E4M3, "E4M3", C.F8_BITS, C.F8_E4M3_MAX),
    _mx(FormatKey.MXFP8_E5M2, "E5M2", C.F8_BITS, C.F8_E5M2_MAX),
    _mx(FormatKey.MXFP6_E2M3, "E2M3", C.F6_BITS, C.F6_E2M3_MAX),
    _mx(FormatKey.MXFP6_E3M2, "E3M2", C.F6_BITS, C.F6_E3M2_MAX),
    _mx(FormatKey.MXFP4, "E2M1", C.F4_BITS, C.F4_E2M1_MAX),
    # (16, 1 + 8): an E4M3 scale and 8 bytes of E2M1 pairs, plus an fp32 tensor scale.
    FormatSpec(
        key=FormatKey.NVFP4, block_size=C.NVFP4_BLOCK_SIZE,
        element="E2M1", element_bits=C.F4_BITS,
        element_min=-C.F4_E2M1_MAX, element_max=C.F4_E2M1_MAX,
        scale_type="E4M3 per block + FP32 per tensor", scale_bits=E4M3_BITS,
        tensor_scale_bits=FP32_BITS, scale_max=C.F8_E4M3_MAX,
        reference="NVIDIA NVFP4; bit-exact with torchao nvfp4_quantize (two-level)",
    ),
    # (64, 4 + 32) over the flattened tensor: an fp32 absmax and 32 bytes of nibbles.
    FormatSpec(
        key=FormatKey.NF4, block_size=C.NF4_BLOCK_SIZE, flat=True,
        element="NF4 (16-entry normal-quantile table)", element_bits=C.NIBBLE_BITS,
        element_min=-C.NF4_NORMALIZED_MAX, element_max=C.NF4_NORMALIZED_MAX,
        scale_type="fp32 absmax (8-bit + fp32 per 256 with double_quant)",
        scale_bits=FP32_BITS,
        reference="QLoRA NF4; bit-exact with bitsandbytes quantize_4bit (CPU)",
        options="double_quant",
    ),
    # block_q8_0: (32, 2 + 32), fp16 d then 32 int8 codes.
    FormatSpec(
        key=FormatKey.Q8_0, block_size=C.QK8_0,
        element="int8", element_bits=INT8_BITS,
        element_min=-C.Q8_0_MAX, element_max=C.Q8_0_MAX,
        scale_type="fp16", scale_bits=FP16_BITS, scale_max=C.F16_MAX, reference=_GGUF,
    ),
    # block_q4_0: (32, 2 + 16), fp16 d then 16 bytes of nibbles (stored q + 8).
    FormatSpec(
        key=FormatKey.Q4_0, block_size=C.QK4_0,
        element="uint4, offset 8", element_bits=C.NIBBLE_BITS,
        element_min=C.Q4_0_MAX_NEGATIVE, element_max=C.NIBBLE_MAX - C.Q4_0_OFFSET,
        scale_type="fp16", scale_bits=FP16_BITS, scale_max=C.F16_MAX, reference=_GGUF,
    ),
    # block_q4_1: (32, 2 + 2 + 16), fp16 d, fp16 m (the block minimum), then nibbles.
    FormatSpec(
        key=FormatKey.Q4_1, block_size=C.QK4_1,
        element="uint4 with fp16 block minimum", element_bits=C.NIBBLE_BITS,
        element_min=0, element_max=C.NIBBLE_MAX,
        scale_type="fp16", scale_bits=FP16_BITS, zero_point_bits=FP16_BITS,
        scale_max=C.F16_MAX, reference=_GGUF,
    ),
    # block_q4_K: (256, 2 + 2 + 12 + 128), fp16 d and dmin, the 8 sub-blocks' 6-bit
    # scales and 6-bit mins packed in 12 bytes, then 128 bytes of nibbles.
    FormatSpec(
        key=FormatKey.Q4_K, block_size=C.QK_K, sub_block_size=C.Q4_K_SUB_BLOCK,
        element="uint4 with a per-32 minimum", element_bits=C.NIBBLE_BITS,
        element_min=0, element_max=C.Q4_K_LEVELS,
        scale_type="fp16 × 6-bit",
        scale_bits=FP16_BITS + Q4_K_SUB_BLOCKS * C.K_SCALE_BITS,
        zero_point_bits=FP16_BITS + Q4_K_SUB_BLOCKS * C.K_SCALE_BITS,
        scale_max=C.F16_MAX, reference=_K_QUANT,
    ),
    # block_q6_K: (256, 128 + 64 + 16 + 2), ql (low nibbles), qh (high 2 bits), the 16
    # sub-blocks' int8 scales, then fp16 d.
    FormatSpec(
        key=FormatKey.Q6_K, block_size=C.QK_K, sub_block_size=C.Q6_K_SUB_BLOCK,
        element="uint6, offset 32", element_bits=C.Q6_K_BITS,
        element_min=-C.Q6_K_NMAX, element_max=C.Q6_K_NMAX - 1,
        scale_type="fp16 × int8",
        scale_bits=Q6_K_SUB_BLOCKS * Q6_K_SCALE_BITS + FP16_BITS,
        scale_max=C.F16_MAX, reference=_K_QUANT,
    ),
)  # fmt: skip

#: Every format's row (default options), by key, in display order.
SPECS: MappingProxyType[FormatKey, FormatSpec] = MappingProxyType(
    {FormatKey(row.key): row for row in _ROWS}
)
if tuple(SPECS) != tuple(FormatKey):
    raise AssertionError("labs.quant.spec: one row per FormatKey, in the enum's order")


def _limits(row: FormatSpec) -> MappingProxyType[str, float]:
    limits = {"max": float(max(-row.element_min, row.element_max)), "bits": row.element_bits}
    if row.scale_max is not None:
        limits["scale_max"] = row.scale_max
    return MappingProxyType(limits)


#: The largest element magnitude, the element bits and (where the block scale is narrow)
#: the largest block scale of every format by key, plus every element type by name
#: (``FORMAT_LIMITS["nvfp4"]["scale_max"] == 448``, ``FORMAT_LIMITS["e4m3"]["max"]``).
FORMAT_LIMITS: MappingProxyType[str, MappingProxyType[str, float]] = MappingProxyType(
    {**C.ELEMENT_LIMITS, **{key.value: _limits(row) for key, row in SPECS.items()}}
)
