"""format-support's assessment: the GPU (chosen or read from the worker), the path
the format takes on it, its bytes and its speed bounds. Imports no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from labs.base import Context
from labs.catalog import memory, roofline
from labs.catalog.formats import (
    CHECKPOINT_FORMATS,
    WEIGHT_FORMATS,
    CheckpointFormat,
)
from labs.catalog.gpus import GPU, GPUS, GpuId, match_smi_name, sm_of
from labs.catalog.kernel_paths import PATH_MEANING, RULES, Rule
from labs.catalog.models import get_model
from labs.format_support.model import GpuPath, Params, Result, SourceRef
from labs.hardware import nvidia_smi

if TYPE_CHECKING:
    GpuChoice = str
else:
    GpuChoice = Literal[GpuId, "auto"]

# Decode reads every weight once per step: weight bytes relative to bf16 are
# the memory-bound speed ratio. 16 = bits per bf16 value.
BASELINE_BITS = 16
BITS_PER_BYTE = 8
# Bits per parameter are computed on a typical projection matrix so that
# per-channel scales (one per row) are counted, not just the block scales.
REFERENCE_MATRIX = (4096, 4096)
SMI_QUERY = ("name", "compute_cap", "memory.total")


def decide(format_key: str, sm: int) -> Rule:
    """The rule that applies to ``format_key`` on a GPU of capability ``sm`` (major×10+minor)."""
    for rule in RULES[format_key]:
        if sm >= rule.min_sm:
            return rule
    raise AssertionError(f"{format_key} has no catch-all rule")  # every table ends at 0


def _matrix_bits_per_param(memory_key: str) -> float:
    """Bits per parameter of the reference projection matrix, side tensors included."""
    rows, cols = REFERENCE_MATRIX
    fmt = WEIGHT_FORMATS[memory_key]
    return fmt.matrix_bytes(rows, cols) * BITS_PER_BYTE / (rows * cols)


def file_bits_per_param(format_key: str) -> float:
    """Stored bits per parameter of a projection matrix, scales included."""
    return _matrix_bits_per_param(CHECKPOINT_FORMATS[format_key].memory_key)


def resident_key(format_key: str, rule: Rule) -> str:
    """The WEIGHT_FORMATS key of what the GPU holds after loading."""
    return rule.upcast_to or rule.repacked_to or CHECKPOINT_FORMATS[format_key].memory_key


def resident_bits_per_param(format_key: str, rule: Rule) -> float:
    if rule.upcast_to:
        return float(WEIGHT_FORMATS[rule.upcast_to].element_bits)
    return _matrix_bits_per_param(resident_key(format_key, rule))


def compute_speedup(gpu: GPU | None, rule: Rule) -> float | None:
    """Peak dense matmul throughput of the path over the GPU's 16-bit peak (None if unknown)."""
    if gpu is None:
        return None
    base = gpu.dense_tflops.get("bf16") or gpu.dense_tflops.get("fp16")
    peak = gpu.dense_tflops.get(rule.compute)
    if not base or not peak:
        return None
    return peak / base


# --- the worker's own GPU ---------------------------------------------------
AUTO_FALLBACK_GPU = "h100"  # 40 GB A100s report 40,960 MiB, 80 GB ones 81,920


@dataclass(frozen=True)
class DetectedGpu:
    name: str
    sm: int
    memory_mib: float | None
    registry_id: str | None


def parse_smi(text: str) -> DetectedGpu | None:
    """The first GPU in the output of ``nvidia-smi --query-gpu=name,compute_cap,memory.total
    --format=csv,noheader,nounits``; ``None`` if no line parses."""
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 2:
            continue
        try:
            major, _, minor = cells[1].partition(".")
            sm = int(major) * 10 + int(minor or 0)
        except ValueError:
            continue
        try:
            mib = float(cells[2]) if len(cells) > 2 else None
        except ValueError:
            mib = None
        return DetectedGpu(cells[0], sm, mib, match_smi_name(cells[0], mib))
    return None


def read_worker_gpu(log: list[str]) -> tuple[DetectedGpu | None, str]:
    """The worker's first GPU via nvidia-smi, and what happened; the command it ran is
    appended to ``log``."""
    if not nvidia_smi.installed():
        return None, "nvidia-smi is not on this worker's PATH: no NVIDIA driver here"
    log.append("$ " + " ".join(nvidia_smi.argv(SMI_QUERY)))
    reply = nvidia_smi.query(SMI_QUERY)
    if reply.returncode is None:
        return None, reply.error or "nvidia-smi did not run"
    out = reply.stdout.strip()
    if reply.returncode != 0 or not out:
        return None, f"nvidia-smi exited {reply.returncode}: {(reply.stderr or out).strip()[:200]}"
    detected = parse_smi(out)
    return detected, out if detected else f"could not parse nvidia-smi output: {out[:200]}"


def _gpu_row(
    format_key: str, gpu_id: str, name: str, sm: int, reg: GPU | None, model_id: str
) -> GpuPath:
    rule = decide(format_key, sm)
    model = get_model(model_id)
    resident = resident_key(format_key, rule)
    weights = memory.weight_bytes(model, resident)
    return GpuPath(
        gpu=gpu_id,
        name=name,
        compute_capability=f"{sm // 10}.{sm % 10}",
        path=rule.path,
        kernel=rule.kernel,
        compute=rule.compute,
        resident_bits_per_param=round(resident_bits_per_param(format_key, rule), 4),
        weights_gb=memory.gb(weights),
        fits_weights_only=None if reg is None else weights <= reg.memory_bytes,
        decode_tokens_per_s_bound=None
        if reg is None
        else reg.bandwidth_bytes_per_s / roofline.weight_bytes_read_per_step(model, resident, 1, 1),
        compute_speedup=compute_speedup(reg, rule),
    )


def _speed_text(
    rule: Rule, ratio: float, whole_model_bound: float, speedup: float | None, quantized: bool
) -> str:
    whole = (
        f"{whole_model_bound:.2f}× for the whole model, whose embeddings and lm_head stay bf16"
        if quantized
        else f"{whole_model_bound:.2f}× for the whole model"
    )
    decode = (
        f"decode (memory-bound, small batch) reads {ratio:.2f}× the weight bytes of bf16 per "
        f"projection matrix, so at best {1 / ratio:.2f}× bf16's tokens/s ({whole})"
    )
    if rule.path == "native":
        prefill = (
            f"prefill and large batches (compute-bound) can reach {speedup:g}× the 16-bit peak"
            if speedup
            else "prefill runs at this type's tensor-core rate"
        )
    elif rule.path == "emulated" and speedup and speedup > 1:
        prefill = (
            f"the matmul itself runs in {rule.compute} (peak {speedup:g}× the 16-bit rate), but "
            "unpacking and re-quantizing activations eat into that at large batch"
        )
    elif rule.path == "emulated":
        prefill = (
            "prefill and large batches gain nothing over 16-bit: the matmul is 16-bit and the "
            "widening costs extra instructions, so these kernels fall behind bf16 GEMMs at large "
            "batch"
        )
    else:
        wider = rule.upcast_to or rule.compute
        prefill = f"prefill runs at the rate of {wider}, the type it was converted to"
    return f"{decode}; {prefill}."


@dataclass(frozen=True)
class _Target:
    gpu_id: str
    name: str
    sm: int
    registry: GPU | None
    detected: str | None
    note: str | None


def _target(params: Params, log: list[str]) -> _Target:
    """The GPU to decide for: a registry entry, or the worker's own card with gpu='auto'
    (what reading it said is appended to ``log``)."""
    if params.gpu != "auto":
        g = GPUS[params.gpu]
        return _Target(g.id, g.name, sm_of(g.compute_capability), g, None, None)
    detected, detail = read_worker_gpu(log)
    log.append(detail)
    if detected is None:
        g = GPUS[AUTO_FALLBACK_GPU]
        note = f"gpu=auto: {detail}; showing the registry's {g.name} instead."
        return _Target(g.id, g.name, sm_of(g.compute_capability), g, detail, note)
    if detected.registry_id:
        g = GPUS[detected.registry_id]
        note = f"gpu=auto: this worker's {detected.name} matches registry entry {g.id}."
        # The path follows the card's own capability, the sizes the registry's datasheet.
        return _Target(g.id, g.name, detected.sm, g, detail, note)
    note = (
        f"gpu=auto: {detected.name} (sm_{detected.sm}) is not in the registry; its path comes "
        "from its compute capability, its bandwidth and peak rates are unknown."
    )
    return _Target(f"worker: {detected.name}", detected.name, detected.sm, None, detail, note)


@dataclass(frozen=True)
class Assessment:
    """The result, and the log of how the worker's GPU was found (shown, not stored)."""

    result: Result
    detection_log: list[str]


def run(params: Params, ctx: Context) -> Assessment:
    ctx.progress(0.05, "choosing the GPU")
    detection_log: list[str] = []
    result = assess(params, detection_log)
    return Assessment(result, detection_log)


def assess(params: Params, detection_log: list[str]) -> Result:
    """The path the format takes on the chosen GPU, its bytes and speed bounds, and the
    same decision for every GPU in the registry. Reading the worker's own GPU
    (gpu='auto') appends what happened to ``detection_log``."""
    spec = CHECKPOINT_FORMATS[params.format]
    target = _target(params, detection_log)
    gpu_id, name, sm, reg = target.gpu_id, target.name, target.sm, target.registry
    notes = [target.note] if target.note else []
    rule = decide(spec.key, sm)
    model = get_model(params.model)
    file_bytes = memory.weight_bytes(model, spec.memory_key)
    resident = resident_key(spec.key, rule)
    resident_bytes = memory.weight_bytes(model, resident)
    file_bits = file_bits_per_param(spec.key)
    resident_bits = resident_bits_per_param(spec.key, rule)
    ratio = resident_bits / BASELINE_BITS
    bf16_read = roofline.weight_bytes_read_per_step(model, "bf16", 1, 1)
    whole_model_bound = bf16_read / roofline.weight_bytes_read_per_step(model, resident, 1, 1)
    speedup = compute_speedup(reg, rule)
    rows = _per_gpu(spec.key, target, params.model)
    verdict = _verdict(spec, name, sm, rule, file_bytes, resident_bytes)
    if rule.note:
        notes.append(rule.note)
    memory_text = (
        f"the file stores {file_bits:.3f} bits per parameter of a projection matrix "
        f"({memory.gb(file_bytes):.2f} GB for {model.name}); on this GPU it occupies "
        f"{resident_bits:.3f} bits ({memory.gb(resident_bytes):.2f} GB)."
    )
    paths = {r.path for r in rows}
    if len(paths) > 1:
        by_path = {
            p: [r.gpu for r in rows if r.path == p]
            for p in ("native", "emulated", "upcast", "unsupported")
        }
        notes.append(
            "The same file takes different paths on different GPUs: "
            + "; ".join(f"{p} on {', '.join(ids)}" for p, ids in by_path.items() if ids)
            + "."
        )
    quantized = WEIGHT_FORMATS[resident].quantized
    sources = {s.url: s for x in RULES[spec.key] for s in x.sources}
    return Result(
        format=spec.key,
        format_title=spec.title,
        gpu=gpu_id,
        gpu_name=name,
        compute_capability=f"{sm // 10}.{sm % 10}",
        path=rule.path,
        meaning=PATH_MEANING[rule.path],
        kernel=rule.kernel,
        compute=rule.compute,
        upcast_to=rule.upcast_to,
        native=rule.path == "native",
        file_bits_per_param=file_bits,
        resident_bits_per_param=resident_bits,
        decode_bytes_ratio=ratio,
        decode_speedup_bound=1 / ratio,
        decode_speedup_bound_whole_model=whole_model_bound,
        compute_speedup=speedup,
        model=model.id,
        weights_file_gb=memory.gb(file_bytes),
        weights_resident_gb=memory.gb(resident_bytes),
        verdict=verdict,
        speed=_speed_text(rule, ratio, whole_model_bound, speedup, quantized),
        memory=memory_text,
        notes=notes,
        detected=target.detected,
        per_gpu=rows,
        sources=[SourceRef(title=s.title, url=s.url) for s in sources.values()],
    )


def _per_gpu(format_key: str, target: _Target, model_id: str) -> list[GpuPath]:
    """The decision on every registry GPU (by capability, then memory), plus the worker's
    own card where the registry does not describe it."""
    rows = [
        _gpu_row(format_key, g.id, g.name, sm_of(g.compute_capability), g, model_id)
        for g in sorted(GPUS.values(), key=lambda g: (g.compute_capability, g.memory_gb))
    ]
    reg, sm, name = target.registry, target.sm, target.name
    if reg is None:
        rows.append(_gpu_row(format_key, target.gpu_id, name, sm, None, model_id))
    elif sm != sm_of(reg.compute_capability):
        rows.append(_gpu_row(format_key, f"worker: {name}", name, sm, reg, model_id))
    return rows


def _verdict(
    spec: CheckpointFormat, name: str, sm: int, rule: Rule, file_bytes: int, resident_bytes: int
) -> str:
    verdict = f"{spec.title} on {name} (sm_{sm}): {rule.path} — {rule.kernel}."
    if rule.upcast_to and resident_bytes != file_bytes:
        verdict += (
            f" Resident as {rule.upcast_to}: {memory.gb(resident_bytes):.2f} GB instead of the "
            f"file's {memory.gb(file_bytes):.2f} GB."
        )
    elif rule.upcast_to:
        verdict += f" Resident as {rule.upcast_to}: the same bytes, a different range."
    elif rule.repacked_to:
        verdict += (
            f" Repacked at load to {memory.gb(resident_bytes):.2f} GB from the file's "
            f"{memory.gb(file_bytes):.2f} GB."
        )
    return verdict
