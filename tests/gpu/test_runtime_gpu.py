"""The three runtime labs and the sandbox on CUDA (`make test-gpu`; skipped without CUDA).

Three layers: the labs in-process on the GPU; the labs in sandboxed children of a
warm parent with device=cuda (the parent must not initialise CUDA, or the child
cannot use it); and a run through the real server, queue and GPU worker.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def run_in_process(lab_id: str, params: dict[str, Any]) -> Any:
    from labs.base import EventContext
    from labs.registry import all_labs

    lab = all_labs()[lab_id]
    return lab.execute(
        lab.params.model_validate(params), EventContext(lambda k, d: None, device="cuda")
    )


def test_labs_in_process_on_cuda() -> None:
    status = run_in_process("gpu-status", {})
    assert status.driver_found and status.gpus and status.gpus[0].memory_total_mib
    env = run_in_process("torch-env", {})
    assert env.cuda_available and env.devices and env.devices[0].native["bf16"]
    major = torch.cuda.get_device_capability()[0]
    assert env.devices[0].native["fp8"] == (
        major >= 9 or torch.cuda.get_device_capability() == (8, 9)
    )
    bq = run_in_process("block-quantize", {"format": "nvfp4", "shape": [4096, 4096]})
    assert bq.device.startswith("cuda") and bq.numel == 4096 * 4096
    cpu = run_in_process("block-quantize", {"format": "nvfp4", "shape": [64, 64], "seed": 5})
    from labs.base import EventContext
    from labs.block_quantize import LAB

    on_cpu = LAB.run(
        LAB.params.model_validate({"format": "nvfp4", "shape": [64, 64], "seed": 5}),
        EventContext(lambda k, d: None, device="cpu"),
    )
    assert (
        cpu.first_blocks[0].codes == on_cpu.first_blocks[0].codes
    )  # the same numbers on both devices
    assert cpu.nbytes == on_cpu.nbytes


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.unit.labs.runtime._warm_parent import WarmParent

    data_dir = tmp_path_factory.mktemp("gpu") / "data"
    data_dir.mkdir()
    p = WarmParent(data_dir, "gpu-test-secret-" + secrets.token_hex(8))
    yield p
    p.close()


def test_labs_in_a_sandboxed_child_on_cuda(parent: Any) -> None:
    out = parent.run({"lab": "torch-env", "params": {}, "device": "cuda"})
    assert out["status"] == "succeeded", out
    assert out["result"]["cuda_available"], out
    assert out["environment"]["device"].startswith("cuda")
    assert out["sandbox"]["gpu_memory"]["enabled"]
    out = parent.run({"lab": "gpu-status", "params": {}, "device": "cuda"})
    assert out["status"] == "succeeded" and out["result"]["driver_found"], out
    out = parent.run(
        {
            "lab": "block-quantize",
            "params": {"shape": [4096, 4096], "format": "mxfp4"},
            "device": "cuda",
        }
    )
    assert out["status"] == "succeeded", out
    assert out["result"]["device"].startswith("cuda")


def test_the_gpu_memory_cap_holds(parent: Any) -> None:
    out = parent.run(
        {"lab": "sandbox-probe-gpu", "params": {"mode": "gpu_memory"}, "device": "cuda"}
    )
    assert out["status"] == "failed" and out["reason"] == "memory", out
    out = parent.run(
        {
            "lab": "sandbox-probe-gpu",
            "params": {"mode": "network", "target": f"127.0.0.1:{parent.port}"},
            "device": "cuda",
        }
    )
    assert out["status"] == "succeeded" and out["result"]["blocked"], out


def test_a_run_through_the_server_and_a_gpu_worker(tmp_path: Path) -> None:
    from app.migrate import upgrade
    from app.settings import Settings
    from tests.factories import make_content
    from tests.integration.conftest import STACK_SETTINGS, Stack, start, wait_final

    env = {
        **STACK_SETTINGS,
        "LOWBIT_DATA_DIR": str(tmp_path / "data"),
        "LOWBIT_CONTENT_DIR": str(make_content(tmp_path)),
        "LOWBIT_WORKER_QUEUES": "cpu,gpu",
        "LOWBIT_GPU_LABS_REQUIRE_ACCOUNT": "false",
    }
    settings = Settings(env="test", data_dir=tmp_path / "data")
    settings.data_dir.mkdir()
    upgrade(settings.db_url)
    stack = Stack("gpu", env, settings, tmp_path)
    try:
        stack.ensure_running()
        c = stack.learner()
        run = wait_final(c, start(c, "block-quantize", {"shape": [1024, 1024]}), timeout=120)
        assert run["status"] == "succeeded", (run, stack.worker.tail() if stack.worker else "")
        assert run["environment"]["device"].startswith("cuda") and run["environment"]["gpu"]
        assert run["sandbox"]["gpu_memory"]["enabled"]
        env_run = wait_final(c, start(c, "torch-env"), timeout=120)
        assert env_run["result"]["cuda_available"]
        # A lab that requires a GPU goes to the gpu queue, which only this worker takes.
        gpu_only = wait_final(c, start(c, "sandbox-probe-gpu-only", {"mode": "ok"}), timeout=120)
        assert gpu_only["status"] == "succeeded" and gpu_only["queue"] == "gpu", gpu_only
        assert gpu_only["environment"]["device"].startswith("cuda")
        # The worker advertises what it has: GPU model, memory and compute capability.
        from sqlalchemy import select

        from app.db import Worker

        with stack.factory() as session:
            caps = session.scalars(select(Worker.capabilities)).all()
        gpus = [g for cap in caps if cap.get("device") == "cuda" for g in cap.get("gpus", [])]
        assert gpus and all(
            g.get("name") and g.get("memory.total") and g.get("compute_cap") for g in gpus
        ), caps
    finally:
        for p in (stack.worker, stack.server):
            if p is not None:
                p.stop()
