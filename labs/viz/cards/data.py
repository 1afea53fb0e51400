"""The numbers each card figure draws, read from the torch-free sources of truth.

Every figure is drawn from one ``FigureData``: its table (the text alternative the card
shows beside the image) and its named ``numbers`` (what the tests compare with the
library). Nothing here imports matplotlib or torch, so the web process can build the
table and check that a committed SVG is current (``fingerprint``) while it loads content.

Sources: ``labs.quant.minifloat`` (the E2M1 element type), ``labs.quant.spec`` (block
layouts), ``labs.catalog.gpus`` (peak FLOP/s and bandwidth), ``labs.catalog.models`` and ``labs.catalog.memory``
(KV bytes per token, and the 16-token block: vLLM's default).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import labs.quant.constants as C
from labs.catalog import formats, memory
from labs.catalog.gpus import get_gpu
from labs.catalog.models import get_model
from labs.quant.minifloat import E2M1
from labs.quant.spec import FP16_BITS, SPECS, FormatKey, FormatSpec

Cell = str | int | float


@dataclass(frozen=True)
class Segment:
    """One run of bytes inside a block: ``nbytes`` bytes with a ``role`` (scale, min,
    packed sub-block scales, codes) and a label; ``separate`` marks bytes that live in a
    tensor of their own rather than inside the block's struct."""

    role: str
    label: str
    nbytes: float
    separate: bool = False


@dataclass(frozen=True)
class FigureData:
    """What one figure shows: a title, a table (``columns`` × ``rows``) and the numbers
    the drawing uses, by name (tests compare these with the library)."""

    name: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    numbers: dict[str, float] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """sha256 of the table and numbers: the SVG carries it, so a check can tell a
        figure drawn from numbers the library no longer gives without matplotlib."""
        blob = json.dumps(
            {"rows": self.rows, "cols": self.columns, "numbers": self.numbers},
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --- E2M1: the 4-bit element grid of NVFP4 and MXFP4 ------------------------------


def e2m1_grid() -> FigureData:
    """The eight non-negative E2M1 values (codes 0-7), their bit fields and the gaps."""
    values = E2M1.positive_values()
    rows = []
    for code, v in enumerate(values):
        exp_field, mant = code >> E2M1.mbits, code & ((1 << E2M1.mbits) - 1)
        step = values[code + 1] - v if code + 1 < len(values) else 0.0
        kind = "zero" if v == 0 else ("subnormal" if exp_field == 0 else "normal")
        rows.append((f"{code:04b}", exp_field, mant, kind, f"{v:g}", f"{step:g}" if step else "—"))
    nv, mx = SPECS[FormatKey.NVFP4], SPECS[FormatKey.MXFP4]
    return FigureData(
        name="e2m1-grid",
        title="The E2M1 grid: every value a 4-bit NVFP4 or MXFP4 element can take",
        columns=("code (s=0)", "exponent field", "mantissa bit", "kind", "value", "gap to next"),
        rows=tuple(rows),
        numbers={
            **{f"value_{i}": v for i, v in enumerate(values)},
            "max": max(values),
            "count": len(values),
            "nvfp4_element_max": nv.element_max,
            "mxfp4_element_max": mx.element_max,
        },
        extra={"values": tuple(values)},
    )


# --- a block's bytes: q4_0, q4_k, nvfp4, mxfp4 --------------------------------------

BLOCK_FORMATS = (FormatKey.Q4_0, FormatKey.Q4_K, FormatKey.NVFP4, FormatKey.MXFP4)


def block_segments(row: FormatSpec) -> tuple[Segment, ...]:
    """The bytes of one block of ``row`` in storage order. GGUF blocks are one struct
    (block_q4_0: d, then the nibbles; block_q4_K: d, dmin, 12 bytes of packed 6-bit
    scales and mins, then the nibbles); NVFP4 and MXFP4 keep codes and block scales in
    separate tensors, so their scale is marked ``separate``."""
    assert row.block_size is not None
    codes = Segment("codes", f"codes ({row.block_size} × {row.element_bits} bit)",
                    row.block_size * row.element_bits / C.BITS_PER_BYTE)  # fmt: skip
    if row.sub_block_size:  # k-quant: fp16 super-scales, then the sub-blocks' 6-bit pairs
        subs = row.block_size // row.sub_block_size
        packed = (row.scale_bits + row.zero_point_bits - 2 * FP16_BITS) / C.BITS_PER_BYTE
        return (
            Segment("scale", "d (fp16)", FP16_BITS / C.BITS_PER_BYTE),
            Segment("min", "dmin (fp16)", FP16_BITS / C.BITS_PER_BYTE),
            Segment("sub", f"{subs} scales + {subs} mins (6 bit each)", packed),
            codes,
        )
    scale_name = "d (fp16)" if row.key.startswith("q") else f"scale ({row.scale_type.split()[0]})"
    separate = not row.key.startswith("q")
    parts = [Segment("scale", scale_name, row.scale_bits / C.BITS_PER_BYTE, separate)]
    if row.zero_point_bits:
        parts.append(Segment("min", "m (fp16)", row.zero_point_bits / C.BITS_PER_BYTE))
    return (*parts, codes)


def block_layouts() -> FigureData:
    """Bytes per block and bits per value of the 4-bit block formats, part by part."""
    rows = []
    numbers: dict[str, float] = {}
    layouts = {}
    for key in BLOCK_FORMATS:
        row = SPECS[key]
        segs = block_segments(row)
        total = sum(s.nbytes for s in segs)
        layouts[key.value] = segs
        numbers[f"{key.value}_block_bytes"] = total
        numbers[f"{key.value}_block_size"] = float(row.block_size or 0)
        numbers[f"{key.value}_bits_per_value"] = row.bits_per_value
        parts = " + ".join(f"{s.label} {s.nbytes:g} B" for s in segs)
        if segs[0].separate:
            parts += "; scales and codes in separate tensors"
        if row.tensor_scale_bits:
            parts += (
                f"; plus one {row.tensor_scale_bits // C.BITS_PER_BYTE} B FP32 scale per tensor"
            )
        rows.append((key.value, row.block_size or 0, parts, f"{total:g}",
                     f"{row.bits_per_value:g}"))  # fmt: skip
    return FigureData(
        name="block-bytes",
        title="One block's bytes: Q4_0, Q4_K, NVFP4 and MXFP4",
        columns=(
            "format",
            "values per block",
            "bytes, in storage order",
            "bytes per block",
            "bits per value",
        ),  # fmt: skip
        rows=tuple(rows),
        numbers=numbers,
        extra={"layouts": layouts},
    )


# --- the roofline: H100, H200, L4 ------------------------------------------------------

ROOFLINE_GPUS = ("h100", "h200", "l4")
ROOFLINE_DTYPE = "bf16"


def ridge_point(gpu_id: str, dtype: str = ROOFLINE_DTYPE) -> float:
    """Arithmetic intensity (FLOP/byte) where a GPU's bandwidth roof meets its compute
    roof: dense peak FLOP/s ÷ DRAM bytes/s."""
    gpu = get_gpu(gpu_id)
    return gpu.dense_tflops[dtype] * 1e12 / gpu.bandwidth_bytes_per_s


def roofline() -> FigureData:
    """Peak bf16 compute, bandwidth and the ridge point of each GPU in ``ROOFLINE_GPUS``."""
    rows = []
    numbers: dict[str, float] = {}
    for gid in ROOFLINE_GPUS:
        gpu = get_gpu(gid)
        ridge = ridge_point(gid)
        numbers[f"{gid}_peak_tflops"] = gpu.dense_tflops[ROOFLINE_DTYPE]
        numbers[f"{gid}_bandwidth_tb_s"] = gpu.bandwidth_tb_s
        numbers[f"{gid}_ridge"] = ridge
        rows.append((gpu.name, f"{gpu.dense_tflops[ROOFLINE_DTYPE]:g}",
                     f"{gpu.bandwidth_tb_s:g}", f"{ridge:.0f}"))  # fmt: skip
    return FigureData(
        name="roofline",
        title="Roofline of H100, H200 and L4 (dense bf16)",
        columns=(
            "GPU",
            "peak dense bf16, TFLOP/s",
            "memory bandwidth, TB/s",
            "ridge point, FLOP/byte",
        ),  # fmt: skip
        rows=tuple(rows),
        numbers=numbers,
    )


# --- a KV page: one 16-token block of Llama 3.1 8B -----------------------------------

KV_PAGE_MODEL = "llama-3.1-8b"
KV_PAGE_DTYPE = "bf16"
# The sequence the figure follows into its last block: 43 = 2 full blocks + 11 tokens.
KV_PAGE_SEQUENCE_TOKENS = 43


def kv_block_tokens() -> int:
    """Tokens per KV-cache block: vLLM's default, which the kv-capacity lab's is too."""
    return memory.VLLM_KV_BLOCK_TOKENS


def kv_page() -> FigureData:
    """One paged-attention block of ``KV_PAGE_MODEL``: its per-layer slot layout (K and V
    for every KV head of every token) and its bytes per layer and over all layers."""
    model = get_model(KV_PAGE_MODEL)
    elem = formats.KV_DTYPE_BYTES[KV_PAGE_DTYPE]
    tokens = kv_block_tokens()
    per_token = memory.kv_bytes_per_token(model, KV_PAGE_DTYPE)
    per_head_vector = model.head_dim * elem  # one K (or V) vector of one head
    per_layer_block = 2 * model.num_kv_heads * per_head_vector * tokens
    numbers = {
        "block_tokens": tokens,
        "num_layers": model.num_layers,
        "num_kv_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "element_bytes": elem,
        "bytes_per_token": per_token,
        "head_vector_bytes": per_head_vector,
        "layer_block_bytes": per_layer_block,
        "block_bytes": per_token * tokens,
        "sequence_tokens": KV_PAGE_SEQUENCE_TOKENS,
        "sequence_blocks": -(-KV_PAGE_SEQUENCE_TOKENS // tokens),
        "last_block_used": KV_PAGE_SEQUENCE_TOKENS
        - (KV_PAGE_SEQUENCE_TOKENS - 1) // tokens * tokens,
    }
    rows = (
        ("tokens per block", f"{tokens}", "vLLM's default block_size"),
        ("K or V vector of one head", f"{per_head_vector:,} B",
         f"{model.head_dim} dims × {elem} B ({KV_PAGE_DTYPE})"),
        ("one token, one layer", f"{2 * model.num_kv_heads * per_head_vector:,} B",
         f"2 (K, V) × {model.num_kv_heads} KV heads × {per_head_vector} B"),
        ("one block, one layer", f"{per_layer_block:,} B ({per_layer_block // 1024} KiB)",
         f"{tokens} tokens × {2 * model.num_kv_heads * per_head_vector:,} B"),
        ("one token, all layers", f"{per_token:,} B", f"{model.num_layers} layers"),
        ("one block, all layers", f"{per_token * tokens:,} B ({per_token * tokens / 2**20:g} MiB)",
         f"{tokens} tokens × {per_token:,} B"),
        (f"a {KV_PAGE_SEQUENCE_TOKENS}-token sequence",
         f"{numbers['sequence_blocks']} blocks", f"{numbers['last_block_used']} of {tokens} slots "
         "of the last block used"),
    )  # fmt: skip
    return FigureData(
        name="kv-page",
        title=f"One {tokens}-token KV-cache block of {model.name} ({KV_PAGE_DTYPE})",
        columns=("what", "bytes", "from"),
        rows=rows,
        numbers={k: float(v) for k, v in numbers.items()},
        extra={"model_name": model.name},
    )
