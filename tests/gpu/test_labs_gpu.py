"""Two labs on the worker's own GPU (`make test-gpu`; skipped without CUDA):
vram-observe finds the out-of-memory point under a memory cap, and format-support
with gpu=auto reads the GPU it runs on."""

from __future__ import annotations

import shutil

import pytest

from labs import format_support as fs
from labs import vram_observe as vo
from labs.catalog import gpus
from tests.unit.labs.helpers import run_lab

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_cuda_run_finds_the_oom_point_under_a_cap(tmp_path):
    torch.cuda.empty_cache()
    get_fraction = getattr(torch.cuda, "get_per_process_memory_fraction", lambda: None)
    fraction = get_fraction()
    held = torch.cuda.memory_allocated()
    params = {
        "hidden_size": 512,
        "seq_len": 256,
        "batch_sizes": [1, 8],
        "dtypes": ["fp32", "bf16"],
        "memory_cap_mb": 1024,
        "max_batch": 4096,
    }
    result, events = run_lab(vo, params, device="cuda", tmpdir=tmp_path)
    assert result.device == "cuda" and "VRAM" in result.measured
    assert result.memory_cap_bytes <= 1024 * vo.MIB
    fp32, bf16 = result.summaries
    for s in result.summaries:
        assert s.weights_measured_bytes == s.weights_estimate_bytes  # exact on the allocator
        assert s.largest_fit_batch and s.first_oom_batch and s.largest_fit_batch < s.first_oom_batch
        assert s.oom_message and "out of memory" in s.oom_message.lower()
    assert bf16.largest_fit_batch > fp32.largest_fit_batch  # half the bytes per activation
    assert result.cuda_context_mib and result.cuda_context_mib > 0
    assert result.largest_batch == fp32.largest_fit_batch
    ok = [m for m in result.measurements if m.ok]
    assert all(m.peak_allocated_bytes and m.reserved_bytes >= m.allocated_bytes for m in ok)
    if shutil.which("nvidia-smi"):
        assert any(m.utilization_pct is not None for m in ok)
    # The lab restores the cap it tightened and leaves nothing allocated behind.
    if fraction is not None:
        assert get_fraction() == pytest.approx(fraction)
    assert torch.cuda.memory_allocated() <= held + 64 * vo.MIB


def test_auto_reads_this_workers_gpu(tmp_path):
    major, minor = torch.cuda.get_device_capability()
    result, _ = run_lab(fs, {"gpu": "auto", "format": "fp8"}, tmpdir=tmp_path)
    assert result.detected and "," in result.detected  # the raw nvidia-smi line
    assert result.compute_capability == f"{major}.{minor}"
    assert result.native == (major * 10 + minor >= gpus.ADA.sm)
