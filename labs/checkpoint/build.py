"""Write a tiny sharded safetensors checkpoint (bf16 or AWQ int4) and break it on purpose.

Everything is written into the directory the caller names (a run's private tmpdir).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from labs.checkpoint.awq import PACKED_BITS, awq_quantize
from labs.checkpoint.layout import (
    AWQ_QUANT_CONFIG,
    CONFIG_FILE,
    INDEX_FILE,
    TINY_CONFIG,
    expected_tensors,
    head_dim,
    is_linear,
    shard_name,
    shard_of,
)

if TYPE_CHECKING:
    import torch

FaultKey = Literal[
    "none", "missing-shard", "shape-mismatch", "dtype-mismatch", "quant-config-mismatch"
]
CheckpointKind = Literal["bf16", "awq"]

# The group size the quant-config-mismatch fault really quantizes with.
MISMATCHED_GROUP_SIZE = 64
INIT_STD = 0.02  # the Llama initializer_range
# Where each fault strikes: (layer, module).
SHAPE_FAULT = (1, "self_attn.k_proj")
AWQ_SHAPE_FAULT = (1, "self_attn.q_proj")
DTYPE_FAULT = (0, "mlp.down_proj")
MISSING_SHARD = 2  # 1-based, as in the file name


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
