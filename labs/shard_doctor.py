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

import os
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import Field

from labs import concepts
from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU
from labs.checkpoint import (
    CONFIG_FILE,
    INDEX_FILE,
    SHARD_COUNT,
    CheckpointKind,
    FaultKey,
    Finding,
    ShardFile,
    build_checkpoint,
    dense_weights,
    fmt_shape,
    forward,
    inspect_checkpoint,
)
from labs.checkpoint.forward import FORWARD_TOKENS

MAX_SEED = 2**31 - 1
KIB = 2**10


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


@dataclass(frozen=True)
class Diagnosis:
    """The computed result and what building the checkpoint did (for the log)."""

    result: Result
    tensors_written: int
    broke: str  # what the injected fault did; "" without one


def run(params: Params, ctx: Context) -> Diagnosis:
    return diagnose(params, ctx.tmpdir, ctx.progress)


def _no_progress(fraction: float, message: str = "") -> None:
    pass


def diagnose(
    params: Params, tmpdir: str, progress: Callable[[float, str], None] = _no_progress
) -> Diagnosis:
    """Build the checkpoint under ``tmpdir``, break it, inspect it, and run it forward if
    it loads clean; ``progress`` hears of each step as it starts."""
    import torch

    directory = os.path.join(tmpdir, f"checkpoint-{params.checkpoint}-{params.fault}")
    os.makedirs(directory, exist_ok=True)
    progress(0.1, "writing config.json, the index and the shards")
    built = build_checkpoint(directory, params.checkpoint, params.fault, params.seed)
    progress(0.4, "loading: following weight_map, opening each shard")
    report = inspect_checkpoint(directory)
    errors = sum(f.severity == "error" for f in report.findings)
    warnings = sum(f.severity == "warning" for f in report.findings)

    forward_text = None
    max_diff = None
    loaded = False
    if report.state_dict is not None and errors == 0:
        progress(0.7, "one forward pass with the loaded weights")
        tokens = torch.arange(FORWARD_TOKENS) % report.config["vocab_size"]
        logits = forward(dense_weights(report.state_dict, report.config), report.config, tokens)
        ref = forward(built.reference, report.config, tokens)
        max_diff = float((logits - ref).abs().max())
        loaded = bool(torch.isfinite(logits).all())
        forward_text = (
            f"forward pass on {FORWARD_TOKENS} tokens: logits {fmt_shape(logits.shape)}, all "
            f"finite: {loaded}; "
            f"max |difference| from the weights that were written: {max_diff:.3g}"
        )
    result = Result(
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
        summary=_summary(report.findings, len(report.found), len(report.files), forward_text),
    )
    return Diagnosis(result, len(built.tensors), built.broke)


def _summary(findings: list[Finding], tensors: int, files: int, forward_text: str | None) -> str:
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    if errors:
        codes = sorted({f.code for f in findings if f.severity == "error"})
        return f"{errors} error(s) ({', '.join(codes)}): this checkpoint must not be loaded as is."
    return (
        f"Clean load: {tensors} tensors in {files} shards match config.json"
        + (f"; {warnings} warning(s)" if warnings else "")
        + (f"; {forward_text}" if forward_text else "")
        + "."
    )


def present(diagnosis: Diagnosis, params: Params, ctx: Context) -> None:
    """What was built and broken, the files and findings tables, the headline metrics, the
    bytes-per-shard plot and one log line per finding."""
    from labs.viz import charts

    result = diagnosis.result
    ctx.log(
        f"Wrote a {result.checkpoint} checkpoint: {CONFIG_FILE}, {INDEX_FILE} and "
        f"{SHARD_COUNT} shards ({diagnosis.tensors_written} tensors)."
    )
    if diagnosis.broke:
        ctx.log(f"Injected fault '{result.fault}': {diagnosis.broke}. The loader is not told.")
    if result.forward is not None:
        ctx.log(result.forward)

    ctx.table(
        "Files the index points to",
        ["file", "present", "bytes on disk", "tensors in index", "tensors in file"],
        [
            [f.name, f.present, f.bytes_on_disk, f.tensors_in_index, f.tensors_in_file]
            for f in result.files
        ],
    )
    if result.findings:
        ctx.table(
            "Findings",
            ["severity", "finding", "file", "tensor", "expected", "found", "safe next step"],
            [
                [f.severity, f.code, f.file, f.tensor, f.expected, f.found, f.next_step]
                for f in result.findings
            ],
        )
    ctx.metric("errors", result.errors, "findings", "error findings")
    ctx.metric(
        "tensors_expected", result.tensors_expected, "tensors", "tensors config.json implies"
    )
    ctx.metric("total_size_bytes", result.total_size_bytes, "bytes", "index metadata.total_size")
    labels = [f.name for f in result.files]
    values = [f.bytes_on_disk / KIB for f in result.files]
    ctx.plot(
        "Bytes on disk per shard",
        charts.bar_chart(labels, values, title="Shards on disk", value_label="KiB (2^10 bytes)"),
        {"files": labels, "kib": values},
        id="shard-bytes",
    )
    for f in result.findings:
        ctx.log(
            f"[{f.severity}] {f.code} {f.file or ''} {f.tensor or ''}: expected {f.expected}; "
            f"found {f.found}. {f.detail} Next: {f.next_step}"
        )
    ctx.log(result.summary)


LAB = Lab(
    id="shard-doctor",
    title="Shard doctor: diagnose a sharded safetensors checkpoint",
    summary="Build a real sharded safetensors checkpoint (bf16 or AWQ int4), break it on purpose — "
    "a missing shard, a wrong shape or dtype, a quantization config that lies — and watch a "
    "loader find each fault with the file, the tensor, expected vs found, and the safe next step.",
    needs_gpu=NeedsGPU.no,
    params=Params,
    run=run,
    present=present,
    time_limit_s=60.0,
    memory_limit_mb=1024,
    numeric_outputs=(
        ("errors", "findings"),
        ("tensors_expected", "tensors"),
        ("total_size_bytes", "bytes"),
    ),
    concept=concepts.shard_doctor,
)
