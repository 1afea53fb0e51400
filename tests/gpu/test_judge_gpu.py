"""The judge's GPU path on a real device (`make test-gpu`; skipped without CUDA or
bubblewrap): a Triton exercise graded with its kernel compiled for the GPU inside the
sandbox, not interpreted, and a submission that can open no device file but its own.

The same arguments without a GPU are checked in tests/unit/judge/test_gpu_path.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from app.runs.judging import Grading
from app.settings import ROOT, Settings
from labs.judge import gpu
from labs.judge.sandbox import Judge

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (make install)"),
]

EXERCISE = "triton-block-absmax"
PROBE = """
import errno, os
import triton

def probe(x, block):
    out = {"device": x.device.type, "interpret": os.environ.get("TRITON_INTERPRET")}
    out["knob"] = bool(getattr(getattr(triton, "knobs", None), "runtime", None)
                       and triton.knobs.runtime.interpret)
    y = torch.empty(x.numel() // block, dtype=torch.float32, device=x.device)
    compiled = absmax_kernel[(y.numel(),)](x, y, BLOCK=block)
    out["asm"] = sorted(getattr(compiled, "asm", {}) or {})
    out["value"] = y
    out["dev"] = sorted(n for n in os.listdir("/dev") if "nvidia" in n)
    for other in ("/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/mem", "/dev/sda"):
        try:
            os.open(other, os.O_RDONLY)
            out[other] = "opened"
        except OSError as e:
            out[other] = errno.errorcode[e.errno]
    return out
"""


@pytest.fixture(scope="module")
def access() -> gpu.GpuAccess:
    found = gpu.detect()
    assert found is not None, "a CUDA machine without the nodes or libcuda the judge needs"
    return found


@pytest.fixture(scope="module")
def grading(access: gpu.GpuAccess) -> Iterator[Grading]:
    g = Grading(Settings(env="test", content_dir=ROOT / "content"), gpu=access)
    try:
        yield g
    finally:
        g.close()


def test_triton_block_absmax_is_graded_compiled_on_the_gpu(grading: Grading) -> None:
    ex = grading.exercises()[EXERCISE]
    v = grading.grade(EXERCISE, "submit", ex.solution)
    assert v.verdict == "passed", (v.message, v.tests, v.output)
    assert "Triton compiles" in v.sandbox["gpu"]["detail"]
    wrong = ex.solution.replace("tl.abs(values)", "values")
    assert grading.grade(EXERCISE, "submit", wrong).verdict == "failed"


def test_the_kernel_was_compiled_and_no_other_device_opens(access: gpu.GpuAccess) -> None:
    from labs.judge.kit import load_exercise

    ex = load_exercise(ROOT / "content" / "exercises" / EXERCISE)
    x = torch.randn(256)
    j = Judge(gpu=access)
    try:
        e = j.run(ex.solution + PROBE, [("probe", (x, 32))])
    finally:
        j.close()
    assert e.status == "ok" and e.results is not None, (e.message, e.output)
    assert e.results[0]["error"] is None, e.results[0]["error"]
    got = e.results[0]["value"]
    assert got["device"] == "cuda" and got["interpret"] is None and not got["knob"]
    assert "ptx" in got["asm"] or "cubin" in got["asm"], got["asm"]  # compiled, not interpreted
    assert torch.equal(got["value"], x.reshape(-1, 32).abs().amax(dim=1))
    assert got["dev"] == sorted(inside.removeprefix("/dev/") for _h, inside in access.nodes)
    for other in ("/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/mem", "/dev/sda"):
        assert got[other] == "ENOENT", (other, got[other])
