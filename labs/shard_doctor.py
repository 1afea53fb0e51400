"""Lab ``shard-doctor``: build a real sharded safetensors checkpoint, break it, diagnose it.

The lab writes a tiny Llama-style checkpoint into the run's private directory —
``config.json``, ``model.safetensors.index.json`` and three shards, in bf16 or
as AWQ int4 (``qweight``/``qzeros``/``scales``, the AutoAWQ GEMM layout) — and
can inject one fault. Then a loader that knows nothing about the fault reads
it the way ``transformers`` does: it follows the index's ``weight_map``, opens
each shard with ``safetensors.safe_open``, and checks every tensor against the
table that ``config.json`` implies (names, shapes, dtypes, and for a quantized
config the packed tensors its ``quantization_config`` requires). Each finding
names the file, the tensor, what was expected and what was found, and the safe
next step. A clean checkpoint is loaded and run forward once.

Units: bytes; shapes as ``[rows, cols]`` (PyTorch's ``[out_features, in_features]``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU

if TYPE_CHECKING:
    import torch

FaultKey = Literal[
    "none", "missing-shard", "shape-mismatch", "dtype-mismatch", "quant-config-mismatch"
]
CheckpointKind = Literal["bf16", "awq"]
Severity = Literal["error", "warning"]

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
SHARD_COUNT = 3
MAX_SEED = 2**31 - 1

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
# The group size the quant-config-mismatch fault really quantizes with.
MISMATCHED_GROUP_SIZE = 64
PACKED_BITS = 32  # qweight / qzeros are int32 words of 32 / bits codes
# AutoAWQ GEMM packs eight 4-bit codes per int32 in this order of output columns
# (awq/modules/linear/gemm.py: order_map = [0, 2, 4, 6, 1, 3, 5, 7]).
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
INIT_STD = 0.02  # the Llama initializer_range
FORWARD_TOKENS = 8
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
# Where each fault strikes: (layer, module).
SHAPE_FAULT = (1, "self_attn.k_proj")
AWQ_SHAPE_FAULT = (1, "self_attn.q_proj")
DTYPE_FAULT = (0, "mlp.down_proj")
MISSING_SHARD = 2  # 1-based, as in the file name


class Params(LabParams):
    fault: FaultKey = Field(
        default="none",
        description="What to break before loading: none, missing-shard (delete a shard the "
        "index points to), shape-mismatch, dtype-mismatch, or quant-config-mismatch (config.json "
        "and tensors disagree about quantization).",
    )
    checkpoint: CheckpointKind = Field(
        default="bf16",
        description="Checkpoint to build: bf16 weights, or AWQ int4 (qweight/qzeros/scales, "
        "group 128, as AutoAWQ writes it).",
    )
    seed: int = Field(
        default=0,
        ge=0,
        le=MAX_SEED,
        description="Seed of the random weights written to the shards.",
    )


class Finding(BaseModel):
    severity: Severity
    code: str = Field(
        description="missing-shard, shape-mismatch, dtype-mismatch, quant-config-mismatch, …"
    )
    file: str | None
    tensor: str | None
    expected: str
    found: str
    detail: str
    next_step: str


class ShardFile(BaseModel):
    name: str
    present: bool
    bytes_on_disk: int
    tensors_in_index: int
    tensors_in_file: int


class Result(LabResult):
    checkpoint: str
    fault: str
    clean: bool = Field(description="No error-level finding")
    loaded: bool = Field(description="Every tensor loaded and one forward pass ran")
    errors: int
    warnings: int
    findings: list[Finding]
    files: list[ShardFile]
    tensors_expected: int
    tensors_found: int
    total_size_bytes: int = Field(description="metadata.total_size in the index, bytes")
    tensor_bytes_found: int = Field(description="Sum of the tensor bytes in the shards present")
    forward: str | None
    logits_max_abs_diff: float | None = Field(
        description="Loaded model's logits vs the weights that were written (fp32)"
    )
    summary: str


# --- the tensor table a config implies ---------------------------------------


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


# --- building the checkpoint (torch) ---------------------------------------


def reference_weights(config: dict[str, Any], seed: int) -> dict[str, torch.Tensor]:
    """fp32 weights for every unquantized tensor name, reproducible from ``seed``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    weights: dict[str, torch.Tensor] = {}
    for e in expected_tensors({**config, "quantization_config": None}).values():
        if e.name.endswith("norm.weight"):
            weights[e.name] = 1 + INIT_STD * torch.randn(e.shape, generator=gen)
        else:
            weights[e.name] = INIT_STD * torch.randn(e.shape, generator=gen)
    return weights


def awq_quantize(
    w: torch.Tensor, bits: int, group: int
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Asymmetric per-group quantization of ``w`` [out, in] into AutoAWQ GEMM tensors, and
    the fp32 weight those tensors decode to (what a correct loader must reproduce)."""
    import torch

    out_f, in_f = w.shape
    q_max = 2**bits - 1
    wg = w.float().reshape(out_f, in_f // group, group)
    lo = wg.amin(-1).clamp(max=0)
    hi = wg.amax(-1).clamp(min=0)
    scale = ((hi - lo) / q_max).clamp(min=torch.finfo(torch.float16).tiny)
    zero = torch.round(-lo / scale).clamp(0, q_max)
    codes = torch.clamp(torch.round(wg / scale[..., None]) + zero[..., None], 0, q_max)
    scale_fp16 = scale.to(torch.float16)
    decoded = ((codes - zero[..., None]) * scale_fp16.float()[..., None]).reshape(out_f, in_f)
    codes = codes.reshape(out_f, in_f).to(torch.int64)
    tensors = {
        "qweight": awq_pack(codes.T.contiguous(), bits),  # [in, out / pack]
        "qzeros": awq_pack(zero.T.to(torch.int64).contiguous(), bits),  # [groups, out / pack]
        "scales": scale_fp16.T.contiguous(),  # [groups, out]
    }
    return tensors, decoded


def awq_pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack ``codes`` [rows, cols] (values < 2**bits) into int32 along cols, AWQ's order."""
    import torch

    pack = PACKED_BITS // bits
    rows, cols = codes.shape
    grouped = codes.reshape(rows, cols // pack, pack)[..., list(AWQ_PACK_ORDER[:pack])]
    shifts = torch.arange(pack, dtype=torch.int64) * bits
    words = (grouped << shifts).sum(-1)
    # Reinterpret as two's complement: the top nibble sets the int32 sign bit.
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def awq_unpack(words: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`awq_pack`: int32 [rows, cols / pack] → int64 codes [rows, cols]."""
    import torch

    pack = PACKED_BITS // bits
    shifts = torch.arange(pack, dtype=torch.int64) * bits
    nibbles = (words.to(torch.int64)[..., None] >> shifts) & (2**bits - 1)
    out = torch.empty_like(nibbles)
    out[..., list(AWQ_PACK_ORDER[:pack])] = nibbles
    return out.reshape(words.shape[0], -1)


def awq_dequantize(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, bits: int
) -> torch.Tensor:
    """fp32 weight [out, in] from AWQ GEMM tensors."""
    codes = awq_unpack(qweight, bits)  # [in, out]
    zeros = awq_unpack(qzeros, bits)  # [groups, out]
    group = codes.shape[0] // scales.shape[0]
    zeros = zeros.repeat_interleave(group, dim=0)
    s = scales.float().repeat_interleave(group, dim=0)
    return ((codes - zeros).float() * s).T.contiguous()


@dataclass
class Built:
    config: dict[str, Any]
    reference: dict[str, torch.Tensor]  # what a correct loader must reproduce, fp32
    broke: str = ""  # what the fault did, for the log
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


def build_checkpoint(directory: str, kind: str, fault: str, seed: int) -> Built:
    """Write config.json, the index and the shards to ``directory``; inject ``fault``."""
    import torch
    from safetensors.torch import save_file

    config = dict(TINY_CONFIG)
    weights = reference_weights(config, seed)
    bits = int(AWQ_QUANT_CONFIG["bits"])
    built = Built(config=config, reference={})
    tensors: dict[str, torch.Tensor] = {}
    if kind == "awq":
        config["quantization_config"] = dict(AWQ_QUANT_CONFIG)
        group = int(AWQ_QUANT_CONFIG["group_size"])
        if fault == "quant-config-mismatch":
            group = MISMATCHED_GROUP_SIZE
            said = AWQ_QUANT_CONFIG["group_size"]
            built.broke = f"quantized with group_size {group}; config.json still says {said}"
        for name, w in weights.items():
            module = name.removesuffix(".weight")
            if is_linear(name):
                parts, built.reference[name] = awq_quantize(w, bits, group)
                for part, t in parts.items():
                    tensors[f"{module}.{part}"] = t
            else:
                tensors[name] = w.to(torch.bfloat16)
                built.reference[name] = tensors[name].float()
    else:
        for name, w in weights.items():
            tensors[name] = w.to(torch.bfloat16)
            built.reference[name] = tensors[name].float()
        if fault == "quant-config-mismatch":
            config["quantization_config"] = dict(AWQ_QUANT_CONFIG)
            built.broke = "config.json gained an AWQ quantization_config; the tensors stay bf16"

    if fault == "shape-mismatch":
        layer, module = AWQ_SHAPE_FAULT if kind == "awq" else SHAPE_FAULT
        if kind == "awq":
            name = f"model.layers.{layer}.{module}.qweight"
            in_f, packed_out = tensors[name].shape
            pack = PACKED_BITS // bits
            # GPTQ's layout: codes packed along the input dim instead of the output dim.
            tensors[name] = torch.zeros(in_f // pack, packed_out * pack, dtype=torch.int32)
            built.broke = f"{name} written in GPTQ's packing, [{in_f // pack}, {packed_out * pack}]"
        else:
            name = f"model.layers.{layer}.{module}.weight"
            hd = head_dim(config)
            heads = config["num_attention_heads"]
            # Exported from a variant with one KV head per query head (no GQA).
            tensors[name] = torch.zeros(heads * hd, config["hidden_size"], dtype=torch.bfloat16)
            built.broke = (
                f"{name} written for {heads} KV heads, [{heads * hd}, {config['hidden_size']}]"
            )
    elif fault == "dtype-mismatch":
        layer, module = DTYPE_FAULT
        if kind == "awq":
            name = f"model.layers.{layer}.{module}.scales"
            tensors[name] = tensors[name].to(torch.bfloat16)
        else:
            name = f"model.layers.{layer}.{module}.weight"
            tensors[name] = tensors[name].to(torch.float16)
        built.broke = f"{name} written as {tensors[name].dtype}"

    by_shard: dict[int, dict[str, torch.Tensor]] = {}
    for name, t in tensors.items():
        by_shard.setdefault(shard_of(name), {})[name] = t
    weight_map: dict[str, str] = {}
    for k, shard in sorted(by_shard.items()):
        save_file(shard, os.path.join(directory, shard_name(k)), metadata={"format": "pt"})
        weight_map.update({name: shard_name(k) for name in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    _write_json(
        os.path.join(directory, INDEX_FILE),
        {"metadata": {"total_size": total}, "weight_map": weight_map},
    )
    _write_json(os.path.join(directory, CONFIG_FILE), config)
    if fault == "missing-shard":
        os.remove(os.path.join(directory, shard_name(MISSING_SHARD)))
        built.broke = f"deleted {shard_name(MISSING_SHARD)}"
    built.tensors = tensors
    return built


def _write_json(path: str, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)


# --- the loader ------------------------------------------------------------


@dataclass
class Inspection:
    config: dict[str, Any]
    findings: list[Finding]
    files: list[ShardFile]
    expected: dict[str, Expected]
    found: dict[str, tuple[str, tuple[int, ...], str]]  # name -> (file, shape, dtype)
    total_size: int
    tensor_bytes: int
    state_dict: dict[str, torch.Tensor] | None


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


def _fmt(shape: Iterable[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def inspect_checkpoint(directory: str) -> Inspection:
    """Read ``directory`` as transformers would and compare it with what config.json implies."""
    from safetensors import safe_open

    findings: list[Finding] = []
    with open(os.path.join(directory, CONFIG_FILE), encoding="utf-8") as f:
        config = json.load(f)
    index_path = os.path.join(directory, INDEX_FILE)
    if os.path.exists(index_path):
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
        weight_map: dict[str, str] = index.get("weight_map", {})
        total_size = int(index.get("metadata", {}).get("total_size", 0))
    else:
        weight_map = {}
        total_size = 0
    if not weight_map and os.path.exists(os.path.join(directory, SINGLE_FILE)):
        with safe_open(os.path.join(directory, SINGLE_FILE), framework="pt") as sf:
            weight_map = {name: SINGLE_FILE for name in sf.keys()}

    referenced: dict[str, list[str]] = {}
    for name, fname in weight_map.items():
        referenced.setdefault(fname, []).append(name)

    found: dict[str, tuple[str, tuple[int, ...], str]] = {}
    files: list[ShardFile] = []
    missing_files: set[str] = set()
    for fname in sorted(referenced):
        path = os.path.join(directory, fname)
        names = referenced[fname]
        if not os.path.exists(path):
            missing_files.add(fname)
            files.append(
                ShardFile(
                    name=fname,
                    present=False,
                    bytes_on_disk=0,
                    tensors_in_index=len(names),
                    tensors_in_file=0,
                )
            )
            layers = sorted({n.split(".")[2] for n in names if n.startswith("model.layers.")})
            findings.append(
                Finding(
                    severity="error",
                    code="missing-shard",
                    file=fname,
                    tensor=names[0],
                    expected=f"{fname} on disk: the index's weight_map assigns it "
                    f"{len(names)} tensors" + (f" (layers {', '.join(layers)})" if layers else ""),
                    found="no such file",
                    detail=f"{len(names)} tensors, e.g. {', '.join(sorted(names)[:3])}, cannot "
                    "be loaded. transformers stops with 'does not appear to have a file named "
                    "…'; a loader told to ignore missing keys would leave these layers randomly "
                    "initialised.",
                    next_step=f"Re-download only {fname} (huggingface-cli download REPO "
                    f"{fname}), check its size against the Hub's file listing, and run this "
                    "check again before loading.",
                )
            )
            continue
        try:
            with safe_open(path, framework="pt") as sf:
                keys = list(sf.keys())
                for name in keys:
                    sl = sf.get_slice(name)
                    found[name] = (fname, tuple(sl.get_shape()), sl.get_dtype())
        except (
            Exception
        ) as exc:  # a truncated or corrupt file: safetensors raises its own error type
            findings.append(
                Finding(
                    severity="error",
                    code="unreadable-shard",
                    file=fname,
                    tensor=None,
                    expected="a complete safetensors file (8-byte header length, JSON "
                    "header, data)",
                    found=f"{type(exc).__name__}: {exc}",
                    detail="The file exists but cannot be parsed: usually an interrupted download.",
                    next_step=f"Delete and re-download {fname}; compare its sha256 with the Hub's.",
                )
            )
            files.append(
                ShardFile(
                    name=fname,
                    present=True,
                    bytes_on_disk=os.path.getsize(path),
                    tensors_in_index=len(names),
                    tensors_in_file=0,
                )
            )
            continue
        files.append(
            ShardFile(
                name=fname,
                present=True,
                bytes_on_disk=os.path.getsize(path),
                tensors_in_index=len(names),
                tensors_in_file=len(keys),
            )
        )
        for name in keys:
            if weight_map.get(name) != fname:
                findings.append(
                    Finding(
                        severity="warning",
                        code="index-mismatch",
                        file=fname,
                        tensor=name,
                        expected=f"weight_map[{name!r}] = {fname!r}",
                        found=f"weight_map says {weight_map.get(name)!r}",
                        detail="The index and the shard disagree about where this tensor lives.",
                        next_step="Regenerate the index from the shards (or re-download "
                        "both from one revision).",
                    )
                )
        for name in set(names) - set(keys):
            findings.append(
                Finding(
                    severity="error",
                    code="index-mismatch",
                    file=fname,
                    tensor=name,
                    expected=f"{name} in {fname}, as the weight_map says",
                    found="not in the file",
                    detail="The index points at a tensor the shard does not contain.",
                    next_step="Re-download the shard and the index from the same revision.",
                )
            )

    in_missing = {n for f in missing_files for n in referenced[f]}
    quant_findings, expected = _check_quantization(config, found)
    findings += quant_findings
    findings += _compare(config, expected, found, in_missing)
    tensor_bytes = sum(_nbytes(shape, dt) for _, shape, dt in found.values())
    if not missing_files and total_size and tensor_bytes != total_size:
        findings.append(
            Finding(
                severity="warning",
                code="total-size-mismatch",
                file=INDEX_FILE,
                tensor=None,
                expected=f"metadata.total_size = {total_size} bytes",
                found=f"{tensor_bytes} bytes of tensors in the shards",
                detail="The index was written for different shards.",
                next_step="Re-download the index with the shards, from one revision.",
            )
        )
    state_dict = None
    if not any(f.severity == "error" for f in findings):
        state_dict = _load(directory, found)
        findings += _non_finite(state_dict)
    return Inspection(
        config, findings, files, expected, found, total_size, tensor_bytes, state_dict
    )


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * DTYPE_BYTES.get(dtype, 1)


def _inferred_groups(
    config: dict[str, Any], found: dict[str, tuple[str, tuple[int, ...], str]], packed: list[str]
) -> dict[str, int]:
    """Group size each quantized module's ``scales`` implies: in_features / scale rows."""
    shapes = linear_shapes(config)
    groups: dict[str, int] = {}
    for m in packed:
        scales = found.get(f"{m}.scales")
        in_f = shapes[m.split(".", 3)[3]][1]
        if scales and len(scales[1]) == 2 and scales[1][0] and in_f % scales[1][0] == 0:
            groups[m] = in_f // scales[1][0]
    return groups


def _check_quantization(
    config: dict[str, Any], found: dict[str, tuple[str, tuple[int, ...], str]]
) -> tuple[list[Finding], dict[str, Expected]]:
    """Does ``quantization_config`` agree with the tensors? Returns the findings and the
    tensor table to check the shards against: the one the tensors' own layout implies, so
    one wrong setting is reported once and not as a finding per tensor."""
    qc = config.get("quantization_config")
    modules = [f"model.layers.{i}.{s}" for i in range(config["num_hidden_layers"]) for s in LINEARS]
    packed = [m for m in modules if f"{m}.qweight" in found]
    plain = [m for m in modules if f"{m}.weight" in found]
    groups = _inferred_groups(config, found, packed)
    if not qc and packed:
        m = packed[0]
        group = max(set(groups.values()), key=list(groups.values()).count, default=None)
        assumed = {**AWQ_QUANT_CONFIG, "group_size": group or AWQ_QUANT_CONFIG["group_size"]}
        return [
            Finding(
                severity="error",
                code="quant-config-mismatch",
                file=CONFIG_FILE,
                tensor=f"{m}.qweight",
                expected=f"{m}.weight in {config.get('torch_dtype')}: config.json has no "
                "quantization_config",
                found=f"packed int4 tensors (qweight/qzeros/scales) in {len(packed)} linear "
                f"modules, scales implying group_size {assumed['group_size']}",
                detail="The tensors are quantized but config.json does not say how; a loader "
                "reports every qweight as unexpected and every weight as missing.",
                next_step="Restore quantization_config from the quantized repo's config.json "
                "(quant_method, bits, group_size, zero_point, version).",
            )
        ], expected_tensors({**config, "quantization_config": assumed})
    if not qc:
        return [], expected_tensors(config)
    desc = ", ".join(f"{k}={qc.get(k)}" for k in ("quant_method", "bits", "group_size"))
    if qc.get("quant_method") != "awq":
        return [
            Finding(
                severity="warning",
                code="quant-config-unchecked",
                file=CONFIG_FILE,
                tensor=None,
                expected="quant_method awq (the one this loader knows)",
                found=desc,
                detail="This loader only checks AWQ tensors.",
                next_step="Check the tensors against your engine's loader for this method.",
            )
        ], expected_tensors(config)
    if plain and not packed:
        m = plain[0]
        _, shape, dt = found[f"{m}.weight"]
        return [
            Finding(
                severity="error",
                code="quant-config-mismatch",
                file=CONFIG_FILE,
                tensor=f"{m}.weight",
                expected=f"{desc}: {m}.qweight (I32), .qzeros (I32) and .scales (F16) for each "
                f"of {len(modules)} linear modules",
                found=f"{m}.weight {dt} {_fmt(shape)} and no qweight in any of the {len(plain)} "
                "linear modules",
                detail="config.json declares an AWQ checkpoint but the tensors are unquantized: "
                "a config copied from a quantized repo, or a quantization run that never saved. "
                "An engine told quantization=awq fails looking for qweight.",
                next_step="Use the config.json of this checkpoint's own revision, or delete "
                "quantization_config to load it as bf16 — or quantize it for real with AutoAWQ "
                "/ llm-compressor. Do not edit tensors to match the config.",
            )
        ], expected_tensors({**config, "quantization_config": None})
    group = int(qc.get("group_size", 0))
    wrong = {m: g for m, g in groups.items() if g != group}
    if not wrong or len(set(groups.values())) != 1:
        return [], expected_tensors(config)  # per-tensor shape checks report any odd one out
    m, real = next(iter(wrong.items()))
    fname, shape, _ = found[f"{m}.scales"]
    out_f, in_f = linear_shapes(config)[m.split(".", 3)[3]]
    return [
        Finding(
            severity="error",
            code="quant-config-mismatch",
            file=CONFIG_FILE,
            tensor=f"{m}.scales",
            expected=f"group_size={group}: scales {_fmt((in_f // group, out_f))} ({in_f} inputs "
            f"/ group {group} = {in_f // group} rows)",
            found=f"scales {_fmt(shape)} in {fname}: {in_f} / {shape[0]} = group_size {real} in "
            f"every one of {len(groups)} quantized modules",
            detail="The tensors were quantized with another group size than config.json says. "
            "What happens depends on the loader: one that sizes its qzeros and scales buffers "
            "from config.json fails at load with a size mismatch on every scales tensor; one "
            "that takes the shapes from the file but the group size from the config loads "
            "without an error and applies every scale to the wrong inputs — garbage output.",
            next_step=f"Set quantization_config.group_size to {real} (the value the quantizer "
            "used: see its quant_config.json or logs) and check again.",
        )
    ], expected_tensors(config, real)


def _shape_hint(config: dict[str, Any], e: Expected, shape: tuple[int, ...]) -> str:
    hd = head_dim(config)
    if (
        e.name.endswith(("k_proj.weight", "v_proj.weight"))
        and len(shape) == 2
        and shape[0] % hd == 0
    ):
        return (
            f"{shape[0]} rows = {shape[0] // hd} KV heads × head_dim {hd}, but config.json says "
            f"num_key_value_heads = {config['num_key_value_heads']}: the checkpoint and the config "
            "come from different model variants."
        )
    bits = int((config.get("quantization_config") or {}).get("bits", 4))
    pack = PACKED_BITS // bits
    if e.name.endswith(".qweight") and shape == (e.shape[0] // pack, e.shape[1] * pack):
        return (
            "codes packed along the input dimension, GPTQ's layout; AWQ's GEMM layout packs "
            "along the output dimension: a GPTQ tensor in a checkpoint labelled AWQ."
        )
    return "The tensor was exported for a different model shape than config.json describes."


def _compare(
    config: dict[str, Any],
    expected: dict[str, Expected],
    found: dict[str, tuple[str, tuple[int, ...], str]],
    in_missing: set[str],
) -> list[Finding]:
    findings: list[Finding] = []
    for name, e in expected.items():
        if name in in_missing:
            continue  # reported once, as its missing shard
        if name not in found:
            findings.append(
                Finding(
                    severity="error",
                    code="missing-tensor",
                    file=None,
                    tensor=name,
                    expected=f"{name} {e.dtype} {_fmt(e.shape)}",
                    found="in no shard",
                    detail="config.json implies this tensor; no shard has it.",
                    next_step="Check that the shards and config.json come from the same revision.",
                )
            )
            continue
        fname, shape, dtype = found[name]
        if shape != e.shape:
            findings.append(
                Finding(
                    severity="error",
                    code="shape-mismatch",
                    file=fname,
                    tensor=name,
                    expected=_fmt(e.shape),
                    found=_fmt(shape),
                    detail=_shape_hint(config, e, shape),
                    next_step="Do not reshape or slice the tensor to fit: get the config.json (and "
                    "tokenizer) of the exact revision the shards were exported from.",
                )
            )
        if dtype != e.dtype:
            if name.endswith(".scales"):
                step = (
                    "AWQ kernels read fp16 scales: re-save the scales as float16 (safe while every "
                    "scale is below fp16's 65504) or re-export the checkpoint."
                )
                detail = (
                    "The quantized kernels expect F16 scales; a bf16 scale tensor is rejected "
                    "or misread."
                )
            elif dtype in FLOAT_DTYPES and e.dtype in FLOAT_DTYPES:
                step = (
                    "Check torch.isfinite on this tensor (fp16 saturates at 65504, bf16 does not), "
                    "then re-export the checkpoint in one dtype; do not rely on the loader's "
                    "silent cast."
                )
                detail = (
                    f"config.json says torch_dtype={config.get('torch_dtype')}; loaders cast "
                    f"{dtype} to {e.dtype} silently, so a mixed export goes unnoticed until "
                    "numbers differ."
                )
            else:
                step = "Re-export the checkpoint: an integer/float swap cannot be fixed by casting."
                detail = "The stored type cannot hold what the config says this tensor holds."
            findings.append(
                Finding(
                    severity="error",
                    code="dtype-mismatch",
                    file=fname,
                    tensor=name,
                    expected=e.dtype,
                    found=dtype,
                    detail=detail,
                    next_step=step,
                )
            )
    for name, (fname, shape, dtype) in sorted(found.items()):
        if name not in expected:
            findings.append(
                Finding(
                    severity="warning",
                    code="unexpected-tensor",
                    file=fname,
                    tensor=name,
                    expected="only tensors config.json implies",
                    found=f"{name} {dtype} {_fmt(shape)}",
                    detail="transformers ignores it with a warning ('Some weights … were not "
                    "used').",
                    next_step="Check the architecture in config.json matches the checkpoint.",
                )
            )
    return findings


def _load(
    directory: str, found: dict[str, tuple[str, tuple[int, ...], str]]
) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    state: dict[str, torch.Tensor] = {}
    by_file: dict[str, list[str]] = {}
    for name, (fname, _, _) in found.items():
        by_file.setdefault(fname, []).append(name)
    for fname, names in sorted(by_file.items()):
        with safe_open(os.path.join(directory, fname), framework="pt") as sf:
            for name in names:
                state[name] = sf.get_tensor(name)
    return state


def _non_finite(state: dict[str, torch.Tensor]) -> list[Finding]:
    import torch

    out = []
    for name, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            out.append(
                Finding(
                    severity="error",
                    code="non-finite",
                    file=None,
                    tensor=name,
                    expected="finite values",
                    found=f"{bad} NaN/Inf values",
                    detail="Usually an fp16 export of a bf16 model that overflowed.",
                    next_step="Re-export from the original weights in bf16 or fp32.",
                )
            )
    return out


# --- the forward pass ---------------------------------------------------------


def dense_weights(
    state: dict[str, torch.Tensor], config: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """fp32 weights by unquantized name; AWQ linears are dequantized."""
    qc = config.get("quantization_config") or {}
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name.endswith(".qweight"):
            module = name.removesuffix(".qweight")
            out[f"{module}.weight"] = awq_dequantize(
                t, state[f"{module}.qzeros"], state[f"{module}.scales"], int(qc.get("bits", 4))
            )
        elif not name.endswith((".qzeros", ".scales")):
            out[name] = t.float()
    return out


def forward(
    weights: dict[str, torch.Tensor], config: dict[str, Any], tokens: torch.Tensor
) -> torch.Tensor:
    """Logits [tokens, vocab] of the Llama-style decoder (causal attention, no rotary
    embedding: enough to prove every tensor is wired where the config says)."""
    import torch
    import torch.nn.functional as F

    eps = float(config["rms_norm_eps"])
    heads, kv_heads, hd = (
        config["num_attention_heads"],
        config["num_key_value_heads"],
        head_dim(config),
    )

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    x = weights["model.embed_tokens.weight"][tokens]
    t = x.shape[0]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        h = rms(x, weights[f"{p}.input_layernorm.weight"])
        q = (h @ weights[f"{p}.self_attn.q_proj.weight"].T).view(t, heads, hd).transpose(0, 1)
        k = (h @ weights[f"{p}.self_attn.k_proj.weight"].T).view(t, kv_heads, hd).transpose(0, 1)
        v = (h @ weights[f"{p}.self_attn.v_proj.weight"].T).view(t, kv_heads, hd).transpose(0, 1)
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        a = (
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
            .transpose(0, 1)
            .reshape(t, heads * hd)
        )
        x = x + a @ weights[f"{p}.self_attn.o_proj.weight"].T
        h = rms(x, weights[f"{p}.post_attention_layernorm.weight"])
        gate = F.silu(h @ weights[f"{p}.mlp.gate_proj.weight"].T)
        x = (
            x
            + (gate * (h @ weights[f"{p}.mlp.up_proj.weight"].T))
            @ weights[f"{p}.mlp.down_proj.weight"].T
        )
    x = rms(x, weights["model.norm.weight"])
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"])
    return x @ head.T


# --- the lab -----------------------------------------------------------------


def run(params: Params, ctx: Context) -> Result:
    import torch

    directory = os.path.join(ctx.tmpdir, f"checkpoint-{params.checkpoint}-{params.fault}")
    os.makedirs(directory, exist_ok=True)
    ctx.progress(0.1, "writing config.json, the index and the shards")
    built = build_checkpoint(directory, params.checkpoint, params.fault, params.seed)
    ctx.log(
        f"Wrote a {params.checkpoint} checkpoint: {CONFIG_FILE}, {INDEX_FILE} and "
        f"{SHARD_COUNT} shards ({len(built.tensors)} tensors)."
    )
    if built.broke:
        ctx.log(f"Injected fault '{params.fault}': {built.broke}. The loader is not told.")

    ctx.progress(0.4, "loading: following weight_map, opening each shard")
    report = inspect_checkpoint(directory)
    errors = sum(f.severity == "error" for f in report.findings)
    warnings = sum(f.severity == "warning" for f in report.findings)

    forward_text = None
    max_diff = None
    loaded = False
    if report.state_dict is not None and errors == 0:
        ctx.progress(0.7, "one forward pass with the loaded weights")
        tokens = torch.arange(FORWARD_TOKENS) % report.config["vocab_size"]
        logits = forward(dense_weights(report.state_dict, report.config), report.config, tokens)
        ref = forward(built.reference, report.config, tokens)
        max_diff = float((logits - ref).abs().max())
        loaded = bool(torch.isfinite(logits).all())
        forward_text = (
            f"forward pass on {FORWARD_TOKENS} tokens: logits {_fmt(logits.shape)}, all "
            f"finite: {loaded}; "
            f"max |difference| from the weights that were written: {max_diff:.3g}"
        )
        ctx.log(forward_text)

    ctx.table(
        "Files the index points to",
        ["file", "present", "bytes on disk", "tensors in index", "tensors in file"],
        [
            [f.name, f.present, f.bytes_on_disk, f.tensors_in_index, f.tensors_in_file]
            for f in report.files
        ],
    )
    if report.findings:
        ctx.table(
            "Findings",
            ["severity", "finding", "file", "tensor", "expected", "found", "safe next step"],
            [
                [f.severity, f.code, f.file, f.tensor, f.expected, f.found, f.next_step]
                for f in report.findings
            ],
        )
    ctx.metric("errors", errors, "findings", "error findings")
    ctx.metric("tensors_expected", len(report.expected), "tensors", "tensors config.json implies")
    ctx.metric("total_size_bytes", report.total_size, "bytes", "index metadata.total_size")

    from labs import plots

    labels = [f.name for f in report.files]
    values = [f.bytes_on_disk / 2**10 for f in report.files]
    ctx.plot(
        "Bytes on disk per shard",
        plots.bar_chart(labels, values, title="Shards on disk", value_label="KiB (2^10 bytes)"),
        {"files": labels, "kib": values},
    )
    for f in report.findings:
        ctx.log(
            f"[{f.severity}] {f.code} {f.file or ''} {f.tensor or ''}: expected {f.expected}; "
            f"found {f.found}. {f.detail} Next: {f.next_step}"
        )
    if errors:
        codes = sorted({f.code for f in report.findings if f.severity == "error"})
        summary = (
            f"{errors} error(s) ({', '.join(codes)}): this checkpoint must not be loaded as is."
        )
    else:
        summary = (
            f"Clean load: {len(report.found)} tensors in {len(report.files)} shards match "
            "config.json"
            + (f"; {warnings} warning(s)" if warnings else "")
            + (f"; {forward_text}" if forward_text else "")
            + "."
        )
    ctx.log(summary)
    ctx.progress(1.0, "done")
    return Result(
        checkpoint=params.checkpoint,
        fault=params.fault,
        clean=errors == 0,
        loaded=loaded,
        errors=errors,
        warnings=warnings,
        findings=report.findings,
        files=report.files,
        tensors_expected=len(report.expected),
        tensors_found=len(report.found),
        total_size_bytes=report.total_size,
        tensor_bytes_found=report.tensor_bytes,
        forward=forward_text,
        logits_max_abs_diff=max_diff,
        summary=summary,
    )


LAB = Lab(
    id="shard-doctor",
    title="Shard doctor: diagnose a sharded safetensors checkpoint",
    summary="Build a real sharded safetensors checkpoint (bf16 or AWQ int4), break it on purpose — "
    "a missing shard, a wrong shape or dtype, a quantization config that lies — and watch a "
    "loader find each fault with the file, the tensor, expected vs found, and the safe next step.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    time_limit_s=60.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("errors", "findings"),
        ("tensors_expected", "tensors"),
        ("total_size_bytes", "bytes"),
    ),
)
