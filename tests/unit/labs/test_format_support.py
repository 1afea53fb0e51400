"""format-support: capability thresholds, golden decisions, the worker's own GPU."""

from __future__ import annotations

import subprocess
import sys
from typing import get_args

import pytest
from pydantic import ValidationError

from labs import format_support as fs
from labs.catalog import formats
from labs.catalog import kernel_paths as fr
from labs.catalog.gpus import GPUS
from labs.hardware import nvidia_smi as smi
from tests.unit.labs.helpers import run_lab


def test_importing_these_labs_imports_no_numeric_stack():
    code = (
        "import sys, labs.format_support, labs.shard_doctor, labs.reproducibility, "
        "labs.vram_observe; bad = {'torch', 'numpy', 'matplotlib', 'safetensors'} & "
        "set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_empty_params_stream_every_event_kind(tmp_path):
    result, events = run_lab(fs, {}, tmpdir=tmp_path)
    kinds = {kind for kind, _ in events}
    assert {"progress", "table", "metric", "plot", "log"} <= kinds
    assert events[-1] == ("progress", {"fraction": 1.0, "message": "done"})
    assert (result.format, result.gpu) == ("nvfp4", "h100")
    assert result.sources and all(s.url.startswith("https://") for s in result.sources)


@pytest.mark.parametrize(
    ("fmt", "gpu", "path"),
    [
        ("nvfp4", "b200", "native"),
        ("nvfp4", "h100", "emulated"),
        ("nvfp4", "a100-80gb", "emulated"),
        ("nvfp4", "v100", "unsupported"),
        ("mxfp4", "b200", "native"),
        ("mxfp4", "h200", "emulated"),
        ("fp8", "a100-80gb", "emulated"),
        ("fp8", "l4", "native"),
        ("fp8", "h100", "native"),
        ("fp8", "t4", "unsupported"),
        ("bf16", "a100-40gb", "native"),
        ("bf16", "v100", "upcast"),
        ("bf16", "t4", "upcast"),
        ("fp16", "v100", "native"),
        ("w8a8-int8", "t4", "native"),
        ("w8a8-int8", "v100", "unsupported"),
        ("int8", "h100", "emulated"),
        ("awq", "v100", "unsupported"),
        ("awq", "t4", "emulated"),
        ("gptq", "v100", "emulated"),
        ("q4_0", "v100", "emulated"),
        ("q4_0", "b200", "emulated"),
    ],
)
def test_golden_decisions(fmt, gpu, path):
    assert fs.decide(fmt, fs.sm_of(GPUS[gpu].compute_capability)).path == path


@pytest.mark.parametrize(
    ("fmt", "gpu", "path"),
    [("nvfp4", "b200", "native"), ("nvfp4", "h100", "emulated"), ("fp8", "a100-80gb", "emulated")],
)
def test_the_lab_reports_the_decision(fmt, gpu, path, tmp_path):
    result, _ = run_lab(fs, {"format": fmt, "gpu": gpu}, tmpdir=tmp_path)
    assert result.path == path and result.native == (path == "native")
    assert next(r for r in result.per_gpu if r.gpu == gpu).path == path
    assert (
        result.verdict.startswith(formats.CHECKPOINT_FORMATS[fmt].title) and path in result.verdict
    )


def test_bf16_on_v100_is_upcast_to_fp16_or_fp32(tmp_path):
    result, _ = run_lab(fs, {"format": "bf16", "gpu": "v100"}, tmpdir=tmp_path)
    assert result.upcast_to in ("fp16", "fp32")
    assert "65504" in " ".join(result.notes)  # the range risk of fp16 is named


def test_native_agrees_with_the_gpu_registry_tensor_types():
    for spec in formats.CHECKPOINT_FORMATS.values():
        if spec.native_type is None:
            continue
        for g in GPUS.values():
            native = fs.decide(spec.key, fs.sm_of(g.compute_capability)).path == "native"
            assert native == g.supports(spec.native_type), (spec.key, g.id)


def test_every_format_answers_for_every_capability_and_cites_sources():
    assert (
        set(get_args(formats.CheckpointFormatKey))
        == set(formats.CHECKPOINT_FORMATS)
        == set(fs.RULES)
    )
    for key, rules in fs.RULES.items():
        assert rules[-1].min_sm == 0, key
        assert [r.min_sm for r in rules] == sorted((r.min_sm for r in rules), reverse=True)
        assert all(r.sources for r in rules), key
        for sm in (0, 60, 70, 75, 80, 86, 89, 90, 100, 120):
            assert fs.decide(key, sm).path in get_args(fs.Path)


def test_the_same_file_takes_different_paths_on_two_gpus(tmp_path):
    result, events = run_lab(fs, {"format": "nvfp4", "gpu": "h100"}, tmpdir=tmp_path)
    paths = {r.gpu: r.path for r in result.per_gpu}
    assert paths["b200"] == "native" and paths["h100"] == "emulated"
    assert set(paths) == set(GPUS)
    assert any("different paths" in n for n in result.notes)
    table = next(d for k, d in events if k == "table" and "each GPU" in d["title"])
    assert len(table["rows"]) == len(GPUS)


def test_memory_is_storage_bits_and_upcast_loses_the_saving(tmp_path):
    on_b200, _ = run_lab(fs, {"format": "nvfp4", "gpu": "b200"}, tmpdir=tmp_path)
    # E2M1 codes + one E4M3 scale per 16 values (+ an fp32 scale per tensor).
    assert on_b200.file_bits_per_param == pytest.approx(4.5, abs=1e-3)
    assert on_b200.decode_bytes_ratio == pytest.approx(4.5 / 16, abs=1e-3)
    assert on_b200.weights_resident_gb == on_b200.weights_file_gb
    on_v100, _ = run_lab(fs, {"format": "nvfp4", "gpu": "v100"}, tmpdir=tmp_path)
    assert on_v100.resident_bits_per_param == 16
    assert on_v100.weights_resident_gb > 2.5 * on_v100.weights_file_gb  # embeddings stay bf16
    # AWQ stores an fp16 scale and a 4-bit zero point per group of 128.
    awq, _ = run_lab(fs, {"format": "awq", "gpu": "a100-80gb"}, tmpdir=tmp_path)
    assert awq.file_bits_per_param == pytest.approx(4 + 16 / 128 + 4 / 128, abs=1e-6)
    assert awq.decode_speedup_bound == pytest.approx(16 / 4.15625, abs=1e-6)
    # A GPTQ file stores the zero points too (qzeros, even when symmetric) and an int32
    # g_idx per input column; Marlin (sm_80+) repacks it to codes and fp16 scales alone,
    # the exllama path (older GPUs) keeps everything.
    gptq, _ = run_lab(fs, {"format": "gptq", "gpu": "a100-80gb"}, tmpdir=tmp_path)
    rows, cols = fs.REFERENCE_MATRIX
    assert gptq.file_bits_per_param == pytest.approx(4 + 20 / 128 + 32 / rows, abs=1e-9)
    assert gptq.resident_bits_per_param == pytest.approx(4 + 16 / 128, abs=1e-9)
    assert gptq.weights_resident_gb < gptq.weights_file_gb
    assert gptq.decode_speedup_bound == pytest.approx(16 / 4.125, abs=1e-6)
    assert "Repacked at load" in gptq.verdict
    on_t4, _ = run_lab(fs, {"format": "gptq", "gpu": "t4"}, tmpdir=tmp_path)
    assert on_t4.resident_bits_per_param == on_t4.file_bits_per_param
    assert on_t4.weights_resident_gb == on_t4.weights_file_gb


def test_decode_bounds_name_their_basis(tmp_path):
    from labs.catalog import roofline
    from labs.catalog.models import get_model

    fields = fs.Result.model_fields
    assert "projection matrix" in (fields["decode_speedup_bound"].description or "")
    assert "Whole model" in (fields["decode_speedup_bound_whole_model"].description or "")
    result, events = run_lab(
        fs, {"format": "nvfp4", "gpu": "b200", "model": "llama-3.1-70b"}, tmpdir=tmp_path
    )
    model = get_model("llama-3.1-70b")
    whole = roofline.weight_bytes_read_per_step(
        model, "bf16", 1, 1
    ) / roofline.weight_bytes_read_per_step(model, "nvfp4", 1, 1)
    assert result.decode_speedup_bound_whole_model == pytest.approx(whole)
    # The bf16 embeddings and lm_head make the whole model's bound the smaller one.
    assert 1 < result.decode_speedup_bound_whole_model < result.decode_speedup_bound
    table = next(d for k, d in events if k == "table" and "each GPU" in d["title"])
    assert "bits/param resident (projection matrix)" in table["columns"]
    # Each GPU's tokens/s bound is on the same basis: the bytes a step reads, so the
    # bound's NVFP4/bf16 ratio on one GPU is the whole-model ratio.
    b200 = next(r for r in result.per_gpu if r.gpu == "b200")
    read = roofline.weight_bytes_read_per_step(model, "nvfp4", 1, 1)
    assert b200.decode_tokens_per_s_bound == pytest.approx(
        GPUS["b200"].bandwidth_bytes_per_s / read
    )
    bf16, _ = run_lab(
        fs, {"format": "bf16", "gpu": "b200", "model": "llama-3.1-70b"}, tmpdir=tmp_path
    )
    bf16_b200 = next(r for r in bf16.per_gpu if r.gpu == "b200")
    assert b200.decode_tokens_per_s_bound / bf16_b200.decode_tokens_per_s_bound == pytest.approx(
        whole
    )


def test_vllm_citations_are_pinned_to_the_release_the_rules_encode():
    urls = {s.url for rules in fs.RULES.values() for r in rules for s in r.sources}
    vllm = [u for u in urls if "vllm" in u]
    assert vllm and not [u for u in vllm if "/main/" in u or "/latest/" in u]
    marlin = [u for u in vllm if "marlin_utils" in u]
    assert marlin and all(f"/blob/{fr.VLLM_RULES_VERSION}/" in u for u in marlin)
    # Every row that gates on FP8/FP4 Marlin's capability says which release it reflects.
    for key in ("fp8", "nvfp4", "mxfp4"):
        for rule in fs.RULES[key]:
            if {fr.VLLM_FP8_MARLIN, fr.VLLM_FP4_MARLIN} & set(rule.sources):
                assert fr.VLLM_RULES_VERSION in rule.note, (key, rule.min_sm)


def test_compute_speedup_only_on_native_low_precision(tmp_path):
    native, _ = run_lab(fs, {"format": "fp8", "gpu": "h100"}, tmpdir=tmp_path)
    assert native.compute_speedup == pytest.approx(2.0)
    emulated, _ = run_lab(fs, {"format": "fp8", "gpu": "a100-80gb"}, tmpdir=tmp_path)
    assert emulated.compute_speedup == pytest.approx(1.0)
    assert "gain nothing" in emulated.speed


@pytest.mark.parametrize(
    ("line", "name", "sm", "registry"),
    [
        ("NVIDIA H200, 9.0, 143771", "NVIDIA H200", 90, "h200"),
        ("NVIDIA A100-SXM4-80GB, 8.0, 81920", "NVIDIA A100-SXM4-80GB", 80, "a100-80gb"),
        ("NVIDIA A100-PCIE-40GB, 8.0, 40960", "NVIDIA A100-PCIE-40GB", 80, "a100-40gb"),
        ("NVIDIA L40S, 8.9, 46068", "NVIDIA L40S", 89, "l40s"),
        ("NVIDIA L4, 8.9, 23034", "NVIDIA L4", 89, "l4"),
        ("Tesla T4, 7.5, 15360", "Tesla T4", 75, "t4"),
        ("NVIDIA GeForce RTX 5090, 12.0, 32607", "NVIDIA GeForce RTX 5090", 120, None),
    ],
)
def test_parse_nvidia_smi(line, name, sm, registry):
    got = fs.parse_smi(line + "\n")
    assert got is not None and (got.name, got.sm, got.registry_id) == (name, sm, registry)


def test_parse_nvidia_smi_rejects_garbage():
    assert fs.parse_smi("") is None
    assert fs.parse_smi("No devices were found") is None


def test_auto_without_a_driver_falls_back_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(smi.shutil, "which", lambda name: None)
    result, _ = run_lab(fs, {"gpu": "auto"}, tmpdir=tmp_path)
    assert result.gpu == fs.AUTO_FALLBACK_GPU
    assert any("no NVIDIA driver" in n for n in result.notes)


def test_auto_reads_an_unknown_gpu_by_its_compute_capability(monkeypatch, tmp_path):
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "NVIDIA GeForce RTX 5090, 12.0, 32607\n", "")

    monkeypatch.setattr(smi.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(smi.subprocess, "run", fake_run)
    result, _ = run_lab(fs, {"gpu": "auto", "format": "nvfp4"}, tmpdir=tmp_path)
    assert calls == [
        ["nvidia-smi", "--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader,nounits"]
    ]
    assert result.path == "native" and result.compute_capability == "12.0"
    worker = [r for r in result.per_gpu if r.gpu.startswith("worker")]
    assert len(worker) == 1 and worker[0].decode_tokens_per_s_bound is None


def test_bad_params_are_rejected():
    with pytest.raises(ValidationError, match="format"):
        fs.Params.model_validate({"format": "int3"})
    with pytest.raises(ValidationError, match="gpu"):
        fs.Params.model_validate({"gpu": "h800"})
    with pytest.raises(ValidationError):
        fs.Params.model_validate({"fromat": "fp8"})
