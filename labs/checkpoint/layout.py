"""The tensor table a Llama-style ``config.json`` implies, and where each tensor is sharded.

Names, shapes (``[out_features, in_features]`` for a linear) and safetensors dtype names
(``BF16``, ``F16``, ``I32``); with an AWQ ``quantization_config`` each linear becomes
``qweight``/``qzeros``/``scales``. Units: bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from labs.checkpoint.awq import PACKED_BITS

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
SHARD_COUNT = 3

# A Llama-shaped model small enough to build, load and run in well under a second.
# hidden_size is a multiple of the AWQ group size so every linear has whole groups.
TINY_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
# What AutoAWQ writes into config.json (4-bit, group 128, asymmetric, GEMM packing).
AWQ_QUANT_CONFIG: dict[str, Any] = {
    "quant_method": "awq",
    "bits": 4,
    "group_size": 128,
    "zero_point": True,
    "version": "gemm",
    "modules_to_not_convert": None,
}
# safetensors dtype names of torch_dtype strings in config.json.
DTYPE_NAMES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
FLOAT_DTYPES = {"BF16", "F16", "F32", "F64", "F8_E4M3", "F8_E5M2"}
LINEARS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)

DTYPE_BYTES = {
    "BF16": 2,
    "F16": 2,
    "F32": 4,
    "F64": 8,
    "I32": 4,
    "I64": 8,
    "I8": 1,
    "U8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "BOOL": 1,
    "I16": 2,
}


@dataclass(frozen=True)
class Expected:
    name: str
    shape: tuple[int, ...]
    dtype: str  # safetensors dtype name: BF16, F16, I32, …
    module: str | None = None  # the linear module it belongs to, if any


def head_dim(config: dict[str, Any]) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def linear_shapes(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """``{module suffix: (out_features, in_features)}`` for one decoder layer."""
    h, i, hd = config["hidden_size"], config["intermediate_size"], head_dim(config)
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
    return {
        "self_attn.q_proj": (q, h),
        "self_attn.k_proj": (kv, h),
        "self_attn.v_proj": (kv, h),
        "self_attn.o_proj": (h, q),
        "mlp.gate_proj": (i, h),
        "mlp.up_proj": (i, h),
        "mlp.down_proj": (h, i),
    }


def awq_shapes(
    out_f: int, in_f: int, bits: int, group: int
) -> dict[str, tuple[tuple[int, int], str]]:
    """AWQ GEMM tensors of one linear: codes packed along the output dim, one group of
    ``group`` inputs per scale row."""
    pack = PACKED_BITS // bits
    groups = in_f // group
    return {
        "qweight": ((in_f, out_f // pack), "I32"),
        "qzeros": ((groups, out_f // pack), "I32"),
        "scales": ((groups, out_f), "F16"),
    }


def expected_tensors(config: dict[str, Any], group_size: int | None = None) -> dict[str, Expected]:
    """Every tensor a Llama-style checkpoint with ``config`` must contain.

    With an AWQ ``quantization_config`` the linears are ``qweight/qzeros/scales``
    (``group_size`` overrides the config's, once the real one has been inferred).
    """
    dtype = DTYPE_NAMES.get(str(config.get("torch_dtype", "float32")), "F32")
    h, v = config["hidden_size"], config["vocab_size"]
    qc = config.get("quantization_config") or {}
    quantized = qc.get("quant_method") == "awq"
    table: list[Expected] = [Expected("model.embed_tokens.weight", (v, h), dtype)]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        table.append(Expected(f"{p}.input_layernorm.weight", (h,), dtype))
        table.append(Expected(f"{p}.post_attention_layernorm.weight", (h,), dtype))
        for suffix, (out_f, in_f) in linear_shapes(config).items():
            module = f"{p}.{suffix}"
            if quantized:
                shapes = awq_shapes(
                    out_f, in_f, int(qc["bits"]), group_size or int(qc["group_size"])
                )
                for part, (shape, dt) in shapes.items():
                    table.append(Expected(f"{module}.{part}", shape, dt, module))
            else:
                table.append(Expected(f"{module}.weight", (out_f, in_f), dtype, module))
    table.append(Expected("model.norm.weight", (h,), dtype))
    if not config.get("tie_word_embeddings"):
        table.append(Expected("lm_head.weight", (v, h), dtype))
    return {e.name: e for e in table}


def is_linear(name: str) -> bool:
    """``model.layers.N.<one of LINEARS>.weight``: a projection AWQ quantizes."""
    parts = name.split(".", 3)
    return name.startswith("model.layers.") and parts[3].removesuffix(".weight") in LINEARS


def shard_name(k: int, total: int = SHARD_COUNT) -> str:
    return f"model-{k:05d}-of-{total:05d}.safetensors"


def shard_of(name: str) -> int:
    """Shard (1-based) a tensor is written to: embeddings and layer 0, then one layer per
    shard, the final norm and lm_head last."""
    if name.startswith("model.layers."):
        layer = int(name.split(".")[2])
        return 1 + min(layer, SHARD_COUNT - 2)
    return 1 if name.startswith("model.embed_tokens") else SHARD_COUNT


def nbytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of a tensor of ``shape`` stored as safetensors ``dtype``."""
    n = 1
    for d in shape:
        n *= d
    return n * DTYPE_BYTES.get(dtype, 1)


def fmt_shape(shape: Iterable[int]) -> str:
    """``[4, 256]``: a shape as findings and logs print it."""
    return "[" + ", ".join(str(d) for d in shape) + "]"
