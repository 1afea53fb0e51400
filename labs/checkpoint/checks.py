"""The checks a loader makes against config.json: the quantization config, then every tensor.

Each check returns findings that name the file, the tensor, what was expected and what was
found, and the safe next step. ``found`` maps a tensor name to ``(file, shape, dtype)``.
"""

from __future__ import annotations

from typing import Any

from labs.checkpoint.awq import PACKED_BITS
from labs.checkpoint.findings import Finding
from labs.checkpoint.layout import (
    AWQ_QUANT_CONFIG,
    CONFIG_FILE,
    FLOAT_DTYPES,
    LINEARS,
    Expected,
    expected_tensors,
    fmt_shape,
    head_dim,
    linear_shapes,
)

Found = dict[str, tuple[str, tuple[int, ...], str]]  # name -> (file, shape, dtype)


def _inferred_groups(config: dict[str, Any], found: Found, packed: list[str]) -> dict[str, int]:
    """Group size each quantized module's ``scales`` implies: in_features / scale rows."""
    shapes = linear_shapes(config)
    groups: dict[str, int] = {}
    for m in packed:
        scales = found.get(f"{m}.scales")
        in_f = shapes[m.split(".", 3)[3]][1]
        if scales and len(scales[1]) == 2 and scales[1][0] and in_f % scales[1][0] == 0:
            groups[m] = in_f // scales[1][0]
    return groups


def check_quantization(
    config: dict[str, Any], found: Found
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
                found=f"{m}.weight {dt} {fmt_shape(shape)} and no qweight in any of the {len(plain)} "
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
            expected=f"group_size={group}: scales {fmt_shape((in_f // group, out_f))} ({in_f} inputs "
            f"/ group {group} = {in_f // group} rows)",
            found=f"scales {fmt_shape(shape)} in {fname}: {in_f} / {shape[0]} = group_size {real} in "
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


def compare(
    config: dict[str, Any],
    expected: dict[str, Expected],
    found: Found,
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
                    expected=f"{name} {e.dtype} {fmt_shape(e.shape)}",
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
                    expected=fmt_shape(e.shape),
                    found=fmt_shape(shape),
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
                    found=f"{name} {dtype} {fmt_shape(shape)}",
                    detail="transformers ignores it with a warning ('Some weights … were not "
                    "used').",
                    next_step="Check the architecture in config.json matches the checkpoint.",
                )
            )
    return findings
