"""The judge's GPU path without a GPU: what a sandbox is given of the NVIDIA devices.

A CPU worker's sandbox (and any Python exercise's) binds no ``/dev/nvidia*`` and forces
Triton's interpreter; a Triton sandbox on a GPU worker gets exactly the control node,
the unified-memory node and its own GPU's node, and Triton compiles. The compiled path
itself runs in tests/gpu/test_judge_gpu.py (``make test-gpu``).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from labs.judge import gpu, policy
from labs.judge.gpu import GpuAccess
from labs.judge.policy import Limits

FAST = Limits(wall_s=3.0, cpu_s=3, tmp_bytes=8 * 2**20, output_bytes=4096)
HOST_NODES = (
    *("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"),
    *("nvidia-uvm-tools", "nvidia-modeset"),
)


def setenvs(args: list[str]) -> dict[str, str]:
    return {args[i + 1]: args[i + 2] for i, a in enumerate(args) if a == "--setenv"}


def pairs(args: list[str], flag: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == flag]


def fake_dev(tmp_path: Path, names: tuple[str, ...] = HOST_NODES) -> Path:
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name in names:
        (dev / name).write_text("")
    return dev


def test_without_a_gpu_no_nvidia_device_is_bound_and_triton_interprets() -> None:
    args = policy.bwrap_args("bwrap", 3, 4, FAST, as_root=True)
    assert not [a for a in args if "nvidia" in a]
    assert "--dev-bind" not in args and "--dev" in args  # bwrap's minimal /dev only
    env = setenvs(args)
    assert env["TRITON_INTERPRET"] == "1"
    assert not {"CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "TRITON_LIBCUDA_PATH"} & set(env)


def test_this_machine_without_nvidia_nodes_gets_no_gpu_access(tmp_path: Path) -> None:
    assert gpu.detect(dev=tmp_path, cuda_available=lambda: True, libcuda_dir=lambda: "/x") is None
    if not any(n.startswith("nvidia") for n in os.listdir("/dev")):
        assert gpu.detect() is None


def test_with_a_gpu_exactly_three_nodes_are_bound_and_nothing_else(tmp_path: Path) -> None:
    dev = fake_dev(tmp_path)
    access = gpu.detect(
        dev=dev, index=2, cuda_available=lambda: True, libcuda_dir=lambda: "/opt/nvidia/lib"
    )
    assert access is not None
    args = policy.bwrap_args("bwrap", 3, 4, FAST, as_root=True, gpu=access)
    assert pairs(args, "--dev-bind") == [
        (str(dev / "nvidiactl"), "/dev/nvidiactl"),
        (str(dev / "nvidia-uvm"), "/dev/nvidia-uvm"),
        (str(dev / "nvidia2"), "/dev/nvidia2"),
    ]
    mentioned = [a for a in args if str(dev) in a or "/dev/nvidia" in a]
    assert sorted(mentioned) == sorted(p for pair in pairs(args, "--dev-bind") for p in pair)
    # the binds come after bwrap's own /dev (which they would otherwise be hidden under)
    assert args.index("--dev-bind") > args.index("--dev")
    assert ("/opt/nvidia/lib", "/opt/nvidia/lib") in pairs(args, "--ro-bind")
    assert "--bind" not in args  # the driver's libraries are read-only
    env = setenvs(args)
    assert "TRITON_INTERPRET" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["TRITON_LIBCUDA_PATH"] == "/opt/nvidia/lib"
    assert env["TRITON_CACHE_DIR"].startswith(policy.SANDBOX_TMP + "/")
    system = gpu.detect(
        dev=dev, index=0, cuda_available=lambda: True, libcuda_dir=lambda: "/usr/lib/x86_64"
    )
    assert system is not None and system.library_binds == ()  # /usr is bound already


def test_no_gpu_access_without_every_node_cuda_or_the_driver(tmp_path: Path) -> None:
    def found(dev: Path, index: int = 0, cuda: bool = True, lib: str | None = "/l") -> bool:
        got = gpu.detect(dev=dev, index=index, cuda_available=lambda: cuda, libcuda_dir=lambda: lib)
        return got is not None

    dev = fake_dev(tmp_path)
    assert found(dev) and not found(dev, index=7)
    assert not found(dev, cuda=False) and not found(dev, lib=None)
    for missing in ("nvidiactl", "nvidia-uvm"):
        partial = fake_dev(tmp_path / missing, tuple(n for n in HOST_NODES if n != missing))
        assert not found(partial), missing


def test_the_assigned_device_is_the_first_visible_one() -> None:
    assert gpu.assigned_index({}) == 0
    assert gpu.assigned_index({"CUDA_VISIBLE_DEVICES": "3,1"}) == 3
    assert gpu.assigned_index({"CUDA_VISIBLE_DEVICES": "GPU-5f2e"}) == 0


def test_libcuda_is_found_with_ldconfig_for_this_architecture(tmp_path: Path) -> None:
    import platform

    arch = gpu.LDCONFIG_ARCH.get(platform.machine(), platform.machine())
    lib = tmp_path / "drv"
    lib.mkdir()
    (lib / "libcuda.so.1").write_text("")
    fake = tmp_path / "ldconfig"
    fake.write_text(
        "#!/bin/sh\necho '2 libs found in cache'\n"
        f"echo '\tlibcuda.so.1 (libc6) => /usr/lib/i386/libcuda.so.1'\n"
        f"echo '\tlibcuda.so.1 (libc6,{arch}) => {lib}/libcuda.so.1'\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert gpu.find_libcuda(str(fake)) == str(lib)
    assert gpu.find_libcuda(str(tmp_path / "missing")) is None


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="make install adds bubblewrap")
def test_a_gpu_sandbox_shows_exactly_its_nodes(tmp_path: Path) -> None:
    """The real bubblewrap with the GPU arguments, harmless nodes standing in for the
    NVIDIA ones: the learner sees those three (writable, as CUDA opens them), no other
    nvidia node, no TRITON_INTERPRET, and seccomp lets a driver-style ioctl through."""
    from labs.judge.sandbox import Judge

    stand_ins = (("/dev/null", "/dev/nvidiactl"), ("/dev/zero", "/dev/nvidia-uvm"))
    fake = GpuAccess(
        nodes=(*stand_ins, ("/dev/full", "/dev/nvidia0")), libcuda_dir="/usr/lib", index=0
    )
    code = (
        "import errno, fcntl, os\n"
        "def probe():\n"
        "    out = {'dev': sorted(n for n in os.listdir('/dev') if 'nvidia' in n)}\n"
        "    out['interpret'] = os.environ.get('TRITON_INTERPRET')\n"
        "    fd = os.open('/dev/nvidiactl', os.O_RDWR)\n"
        "    try:\n"
        "        fcntl.ioctl(fd, 0xC020462B, bytes(32))  # _IOWR('F', 0x2b, 32 bytes)\n"
        "    except OSError as e:\n"
        "        out['ioctl'] = errno.errorcode[e.errno]\n"
        "    for other in ('/dev/nvidia1', '/dev/nvidia-uvm-tools', '/dev/nvidia-modeset'):\n"
        "        try:\n"
        "            os.open(other, os.O_RDWR)\n"
        "            out[other] = 'opened'\n"
        "        except OSError as e:\n"
        "            out[other] = errno.errorcode[e.errno]\n"
        "    return out\n"
    )
    j = Judge(FAST, gpu=fake)
    try:
        e = j.run(code, [("probe", ())])
    finally:
        j.close()
    assert e.status == "ok" and e.results is not None, (e.status, e.message, e.output)
    got = e.results[0]["value"]
    assert got["dev"] == ["nvidia-uvm", "nvidia0", "nvidiactl"], got
    assert got["interpret"] is None
    assert got["ioctl"] == "ENOTTY", got  # the device said no, not seccomp (EPERM)
    for other in ("/dev/nvidia1", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"):
        assert got[other] == "ENOENT", got
    assert "Triton compiles" in e.protections["gpu"]["detail"]
    assert "unlimited" in e.protections["rlimits"]["detail"]


def test_a_gpu_worker_without_cgroups_keeps_triton_interpreted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without an address-space limit only a cgroup bounds a GPU sandbox's memory: a
    worker that cannot make one gives Triton exercises no GPU."""
    from app.runs.judging import Grading
    from app.settings import ROOT, Settings
    from labs.judge import cgroups

    fake = GpuAccess(nodes=(("/dev/null", "/dev/nvidiactl"),), libcuda_dir="/usr/lib", index=0)
    monkeypatch.setattr(gpu, "detect", lambda **_: fake)
    g = Grading(Settings(env="test", content_dir=ROOT / "content"))
    monkeypatch.setattr(cgroups, "create", lambda *_: cgroups.Cgroup(detail="not available"))
    g.use_gpu(True)
    assert g.gpu is None and g.judge(on_gpu=True).gpu is None
    made: list[cgroups.Cgroup] = []

    def create(*_: object) -> cgroups.Cgroup:
        made.append(cgroups.Cgroup([Path("/nonexistent")], "v1"))
        return made[-1]

    monkeypatch.setattr(cgroups, "create", create)
    g.use_gpu(True)
    assert g.gpu == fake and g.judge(on_gpu=True).gpu == fake and g.judge().gpu is None
    assert made and not made[0].dirs  # the probe was removed
    g.use_gpu(False)
    assert g.gpu is None
