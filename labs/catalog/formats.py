"""The format vocabularies, each built once: tensor-core input types, checkpoint weight
formats (on the rows of ``labs.quant.spec``), KV cache dtypes and the checkpoint formats
whose kernel paths ``labs.catalog.kernel_paths`` lists.

A new ``labs.quant`` format is one class plus its row in ``labs/quant/spec.py``; it
becomes a weight format of the budget labs by one ``WeightFormat`` row here, and a
checkpoint format of format-support by one ``CheckpointFormat`` row plus its rules.

What counts as weights (``weight_format``):
- ``fp32``, ``bf16``, ``fp16`` are plain dtypes: every tensor is stored in it.
- Every other format is a *weight quantization* format: the projection
  matrices (q, k, v, o, gate, up, down, every expert's) are quantized; the
  token embedding, lm_head, norms, biases and the MoE router stay in bf16 —
  the default of llm-compressor, ModelOpt, AutoAWQ/GPTQ and bitsandbytes.
- Quantized storage counts every stored byte: element codes, block scales and
  per-tensor scales, with the layout of the format named in ``WEIGHT_FORMATS``
  (for example nvfp4: 4-bit E2M1 codes + one E4M3 scale per 16 values
  = 4.5 bits/value, plus one fp32 scale per tensor).

KV cache: ``kv_dtype`` bytes per cached element; per-tensor KV scales (fp8)
are a few bytes per layer and are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import labs.quant.constants as C
from labs.quant.spec import FP16_BITS, FP32_BITS, INT4_DEFAULT_GROUP, SPECS, FormatKey, FormatSpec

BITS_PER_BYTE = 8

# Tensor-core input types (what ``labs.catalog.gpus`` lists per architecture).
TensorType = Literal[
    "tf32",
    "bf16",
    "fp16",
    "fp8_e4m3",
    "fp8_e5m2",
    "mxfp8",
    "fp6",
    "mxfp6",
    "fp4",
    "mxfp4",
    "nvfp4",
    "int8",
    "int4",
]
# The ``GPU.dense_tflops`` key a tensor type's peak is listed under (datasheets give one
# figure per width: FP8, FP6, FP4); the other types are listed under their own name.
_THROUGHPUT_KEY: dict[str, str] = {
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "mxfp8": "fp8",
    "mxfp6": "fp6",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
}


def throughput_key(tensor_type: str) -> str:
    """The ``dense_tflops`` key of ``tensor_type``: nvfp4 → fp4, fp8_e4m3 → fp8, int8 → int8."""
    return _THROUGHPUT_KEY.get(tensor_type, tensor_type)


@dataclass(frozen=True)
class WeightFormat:
    """How one checkpoint weight format stores a ``[rows, cols]`` matrix.

    ``spec`` is its row of ``labs.quant.spec`` (block size, element, scale, zero-point
    and tensor-scale bits), configured as checkpoints store it: ``block_size`` values
    along the input dim share one scale (and, for asymmetric formats such as AWQ, one
    zero point); ``block_size=None`` means one scale per output row (per channel).
    ``column_bits`` are stored once per input column (GPTQ's ``g_idx``).
    """

    key: str
    spec: FormatSpec
    quantized: bool
    layout: str
    column_bits: int = 0
    # The tensor-core type a matmul on these weights runs in where the GPU has it
    # (otherwise they are widened and the matmul runs in bf16/fp16); fp32 weights are
    # assumed to run as TF32 (torch.backends.cuda.matmul.allow_tf32).
    native_type: TensorType | None = None
    lab_choice: bool = True  # offered as a budget lab's weight_format

    @property
    def element_bits(self) -> int:
        return self.spec.element_bits

    @property
    def block_size(self) -> int | None:
        return self.spec.block_size

    def matrix_bytes(self, rows: int, cols: int) -> int:
        """Bytes of one ``[rows, cols]`` matrix: codes + block scales and zero points +
        per-column indices + tensor scale. Unlike labs.quant, which pads each row to whole
        blocks, the codes of a partial last block are counted as they are (a checkpoint
        holds only the real values; ``block_alignment_problems`` flags such shapes)."""
        spec = self.spec
        codes_bits = rows * cols * spec.element_bits
        if not self.quantized:
            return math.ceil(codes_bits / BITS_PER_BYTE)
        blocks_per_row = 1 if spec.block_size is None else math.ceil(cols / spec.block_size)
        scale_bits = rows * blocks_per_row * (spec.scale_bits + spec.zero_point_bits)
        column_bits = cols * self.column_bits
        return math.ceil(
            (codes_bits + scale_bits + column_bits + spec.tensor_scale_bits) / BITS_PER_BYTE
        )

    @property
    def bits_per_value(self) -> float:
        """Stored bits per element including block scales and zero points (not per-row,
        per-column or per-tensor ones)."""
        return self.spec.bits_per_value


INT4_GROUP = INT4_DEFAULT_GROUP  # the usual GPTQ/AWQ group size
GPTQ_G_IDX_BITS = 32  # g_idx: the group of each input column, int32
NF4_BLOCK = C.NF4_BLOCK_SIZE  # bitsandbytes blocksize for 4-bit (qlora-budget reads it)
# AWQ and GPTQ checkpoints: an fp16 scale and a 4-bit zero point per group of 128.
_INT4_ZERO_POINT = SPECS[FormatKey.INT4].with_granularity(
    INT4_GROUP, FP16_BITS, "fp16", zero_point_bits=SPECS[FormatKey.INT4].element_bits
)

WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.key: f
    for f in (
        WeightFormat(
            "fp32", FormatSpec.dtype("fp32", FP32_BITS), False, "IEEE binary32", native_type="tf32"
        ),
        WeightFormat("bf16", FormatSpec.dtype("bf16", FP16_BITS), False, "bfloat16"),
        WeightFormat("fp16", FormatSpec.dtype("fp16", FP16_BITS), False, "IEEE binary16"),
        WeightFormat(
            "fp8",
            SPECS[FormatKey.FP8_E4M3].with_granularity("channel", FP32_BITS, "fp32"),
            quantized=True,
            layout="E4M3 codes, one fp32 scale per output channel",
            native_type="fp8_e4m3",
        ),
        WeightFormat(
            "int8",
            SPECS[FormatKey.INT8],
            quantized=True,
            layout="symmetric int8, one fp32 scale per output channel",
            native_type="int8",
        ),
        WeightFormat(
            "int4",
            SPECS[FormatKey.INT4].with_granularity(INT4_GROUP, FP16_BITS, "fp16"),
            quantized=True,
            layout="symmetric int4, one fp16 scale per 128 values (what vLLM's Marlin kernel keeps "
            "of a symmetric GPTQ checkpoint)",
        ),
        WeightFormat(
            "awq",
            _INT4_ZERO_POINT,
            quantized=True,
            layout="asymmetric int4 (AutoAWQ GEMM): one fp16 scale and one 4-bit zero point "
            "(qzeros, eight per int32) per 128 values",
            lab_choice=False,
        ),
        WeightFormat(
            "gptq",
            _INT4_ZERO_POINT,
            quantized=True,
            column_bits=GPTQ_G_IDX_BITS,
            layout="GPTQ checkpoint (AutoGPTQ/GPTQModel): int4 codes eight per int32 "
            "(qweight), one fp16 scale and one 4-bit zero point (qzeros, stored even when "
            "symmetric) per 128 values, one int32 group index per input column (g_idx)",
            lab_choice=False,
        ),
        WeightFormat(
            "nvfp4",
            SPECS[FormatKey.NVFP4],
            quantized=True,
            layout="E2M1 codes, one E4M3 scale per 16 values, one fp32 scale per tensor",
            native_type="nvfp4",
        ),
        WeightFormat(
            "mxfp4",
            SPECS[FormatKey.MXFP4],
            quantized=True,
            layout="E2M1 codes, one E8M0 scale per 32 values (OCP MX v1.0)",
            native_type="mxfp4",
        ),
        WeightFormat(
            "nf4",
            SPECS[FormatKey.NF4],
            quantized=True,
            layout="NF4 codes, one fp32 absmax per 64 values (bitsandbytes, no double quant)",
        ),
        WeightFormat(
            "q4_0",
            SPECS[FormatKey.Q4_0],
            quantized=True,
            layout="GGUF Q4_0: 18-byte block = fp16 scale + 32 nibbles",
        ),
        WeightFormat(
            "q8_0",
            SPECS[FormatKey.Q8_0],
            quantized=True,
            layout="GGUF Q8_0: 34-byte block = fp16 scale + 32 int8",
        ),
    )
}

# Bytes per cached K/V element, in the order the budget labs offer them.
KV_DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp32": 4}
# Literal types built from the tables, for pydantic fields: a field of such a type accepts
# exactly the table's keys, in its order. (A type checker cannot read a Literal built from
# data; it sees str.)
if TYPE_CHECKING:
    KvDtype = str
    WeightFormatKey = str
else:
    KvDtype = Literal[tuple(KV_DTYPE_BYTES)]
    WeightFormatKey = Literal[tuple(k for k, f in WEIGHT_FORMATS.items() if f.lab_choice)]


# --- labs.quant's formats, as the model labs offer them ---------------------------------
# Every row of ``labs.quant.spec``, in its order: a new format is offered by adding its row.
QUANT_FORMAT_KEYS: tuple[str, ...] = tuple(key.value for key in SPECS)
if TYPE_CHECKING:
    QuantFormatKey = str
else:
    QuantFormatKey = Literal[QUANT_FORMAT_KEYS]
# Elements per block along a row for each format with its default options (None: one
# scale per row or tensor).
QUANT_BLOCK_SIZES: dict[str, int | None] = {key.value: row.block_size for key, row in SPECS.items()}


# --- checkpoint formats: what format-support decides a kernel path for -------------


@dataclass(frozen=True)
class CheckpointFormat:
    key: str
    title: str
    memory_key: str  # WEIGHT_FORMATS key: how the file stores the weights
    native_type: TensorType | None  # the tensor-core type that makes this format native


CHECKPOINT_FORMATS: dict[str, CheckpointFormat] = {
    f.key: f
    for f in (
        CheckpointFormat("bf16", "bf16 (bfloat16 weights and activations)", "bf16", "bf16"),
        CheckpointFormat("fp16", "fp16 (IEEE half weights and activations)", "fp16", "fp16"),
        CheckpointFormat(
            "fp8", "FP8 W8A8 (E4M3 weights and activations, per-channel scales)", "fp8", "fp8_e4m3"
        ),
        CheckpointFormat("int8", "int8 weight-only (W8A16, per-channel scales)", "int8", None),
        CheckpointFormat(
            "w8a8-int8",
            "int8 W8A8 (SmoothQuant-style int8 weights and activations)",
            "int8",
            "int8",
        ),
        CheckpointFormat("awq", "int4 AWQ (W4A16, group 128, zero points)", "awq", None),
        CheckpointFormat(
            "gptq", "int4 GPTQ (W4A16, group 128, symmetric, no act-order)", "gptq", None
        ),
        CheckpointFormat("mxfp4", "MXFP4 (OCP MX: E2M1, E8M0 scale per 32)", "mxfp4", "mxfp4"),
        CheckpointFormat(
            "nvfp4", "NVFP4 (E2M1, E4M3 scale per 16, fp32 tensor scale)", "nvfp4", "nvfp4"
        ),
        CheckpointFormat("q4_0", "GGUF Q4_0 (4-bit, fp16 scale per 32)", "q4_0", None),
    )
}

if TYPE_CHECKING:
    CheckpointFormatKey = str
else:
    CheckpointFormatKey = Literal[tuple(CHECKPOINT_FORMATS)]
