"""Read a checkpoint directory as ``transformers`` does and say what is wrong with it.

The loader knows nothing about how the checkpoint was built or broken: it follows the
index's ``weight_map``, opens each shard with ``safetensors.safe_open``, checks every
tensor against the table ``config.json`` implies, and loads the weights only when no
error was found. Units: bytes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labs.checkpoint.checks import Found, check_quantization, compare
from labs.checkpoint.findings import Finding, ShardFile
from labs.checkpoint.layout import CONFIG_FILE, INDEX_FILE, SINGLE_FILE, Expected, nbytes

if TYPE_CHECKING:
    import torch


@dataclass
class Inspection:
    config: dict[str, Any]
    findings: list[Finding]
    files: list[ShardFile]
    expected: dict[str, Expected]
    found: Found
    total_size: int
    tensor_bytes: int
    state_dict: dict[str, torch.Tensor] | None


@dataclass
class _Shards:
    """What opening every file the index names gave."""

    found: Found = field(default_factory=dict)
    files: list[ShardFile] = field(default_factory=list)
    missing_files: set[str] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)


def inspect_checkpoint(directory: str) -> Inspection:
    """Read ``directory`` as transformers would and compare it with what config.json implies."""
    with open(os.path.join(directory, CONFIG_FILE), encoding="utf-8") as f:
        config = json.load(f)
    weight_map, total_size = _read_index(directory)
    referenced: dict[str, list[str]] = {}
    for name, fname in weight_map.items():
        referenced.setdefault(fname, []).append(name)
    shards = _open_shards(directory, referenced, weight_map)
    findings = shards.findings
    found = shards.found

    in_missing = {n for f in shards.missing_files for n in referenced[f]}
    quant_findings, expected = check_quantization(config, found)
    findings += quant_findings
    findings += compare(config, expected, found, in_missing)
    tensor_bytes = sum(nbytes(shape, dt) for _, shape, dt in found.values())
    if not shards.missing_files and total_size and tensor_bytes != total_size:
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
        config, findings, shards.files, expected, found, total_size, tensor_bytes, state_dict
    )


def _read_index(directory: str) -> tuple[dict[str, str], int]:
    """``(weight_map, metadata.total_size in bytes)``; a single-file checkpoint maps every
    tensor to ``model.safetensors``."""
    from safetensors import safe_open

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
    return weight_map, total_size


def _open_shards(
    directory: str, referenced: dict[str, list[str]], weight_map: dict[str, str]
) -> _Shards:
    """Open each file the index names (sorted) and read its tensors' shapes and dtypes."""
    from safetensors import safe_open

    out = _Shards()
    for fname in sorted(referenced):
        path = os.path.join(directory, fname)
        names = referenced[fname]
        if not os.path.exists(path):
            out.missing_files.add(fname)
            out.files.append(_shard_row(fname, False, 0, len(names), 0))
            out.findings.append(_missing_shard(fname, names))
            continue
        try:
            with safe_open(path, framework="pt") as sf:
                keys = list(sf.keys())
                for name in keys:
                    sl = sf.get_slice(name)
                    out.found[name] = (fname, tuple(sl.get_shape()), sl.get_dtype())
        except Exception as exc:  # a truncated or corrupt file: safetensors raises its own type
            out.findings.append(_unreadable_shard(fname, exc))
            out.files.append(_shard_row(fname, True, os.path.getsize(path), len(names), 0))
            continue
        out.files.append(_shard_row(fname, True, os.path.getsize(path), len(names), len(keys)))
        out.findings += _index_disagreements(fname, names, keys, weight_map)
    return out


def _shard_row(name: str, present: bool, size: int, in_index: int, in_file: int) -> ShardFile:
    return ShardFile(
        name=name,
        present=present,
        bytes_on_disk=size,
        tensors_in_index=in_index,
        tensors_in_file=in_file,
    )


def _missing_shard(fname: str, names: list[str]) -> Finding:
    layers = sorted({n.split(".")[2] for n in names if n.startswith("model.layers.")})
    return Finding(
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


def _unreadable_shard(fname: str, exc: Exception) -> Finding:
    return Finding(
        severity="error",
        code="unreadable-shard",
        file=fname,
        tensor=None,
        expected="a complete safetensors file (8-byte header length, JSON header, data)",
        found=f"{type(exc).__name__}: {exc}",
        detail="The file exists but cannot be parsed: usually an interrupted download.",
        next_step=f"Delete and re-download {fname}; compare its sha256 with the Hub's.",
    )


def _index_disagreements(
    fname: str, names: list[str], keys: list[str], weight_map: dict[str, str]
) -> list[Finding]:
    """Tensors the shard has but the index places elsewhere, and those the index promises
    that the shard lacks."""
    findings = [
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
        for name in keys
        if weight_map.get(name) != fname
    ]
    findings += [
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
        for name in set(names) - set(keys)
    ]
    return findings


def _load(directory: str, found: Found) -> dict[str, torch.Tensor]:
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
