"""The judge's GPU path: which NVIDIA device nodes and driver libraries a sandbox for
Triton exercises gets on a worker with a CUDA device, and nothing else.

On a CPU worker (or for Python exercises) the sandbox binds no ``/dev/nvidia*`` and
forces Triton's interpreter (``TRITON_INTERPRET=1``). On a GPU worker a Triton
exercise's sandbox gets exactly three device nodes, the way Flatpak exposes a GPU
(``--dev-bind``, one node at a time, never the whole ``/dev``):

- ``/dev/nvidiactl``: the driver's control node, every CUDA process opens it;
- ``/dev/nvidia-uvm``: unified memory, which the CUDA runtime needs to start;
- ``/dev/nvidia<N>``: the one GPU this worker judges on, no other.

Not ``/dev/nvidia-uvm-tools`` (profilers and debuggers only), ``/dev/nvidia-modeset``
(display) or ``/dev/nvidia-caps`` (MIG instances: not supported by this path). The
driver's libraries are read-only: under ``/usr`` or ``/lib*`` they are bound already;
elsewhere their folder is bound at the same path. Trusted side only: this module opens
no device and never initialises CUDA.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEV = Path("/dev")
CONTROL_NODES = ("nvidiactl", "nvidia-uvm")
# Folders the sandbox binds read-only anyway (labs.judge.policy).
SYSTEM_DIRS = ("/usr/", "/lib/", "/lib64/", "/lib32/")
LDCONFIG_TIMEOUT_S = 10.0
LDCONFIG_ARCH = {"x86_64": "x86-64", "aarch64": "AArch64"}


@dataclass(frozen=True)
class GpuAccess:
    """What a GPU sandbox is given: ``nodes`` as (host path, path inside) pairs, the
    folder of ``libcuda.so.1``, and the CUDA ordinal of the assigned device."""

    nodes: tuple[tuple[str, str], ...]
    libcuda_dir: str
    index: int

    @property
    def library_binds(self) -> tuple[str, ...]:
        """Driver library folders to bind read-only (those outside the system dirs)."""
        d = self.libcuda_dir.rstrip("/") + "/"
        return () if d.startswith(SYSTEM_DIRS) else (self.libcuda_dir,)

    def env(self) -> dict[str, str]:
        """The sandbox's variables for CUDA and Triton (no TRITON_INTERPRET)."""
        return {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": str(self.index),
            "LD_LIBRARY_PATH": self.libcuda_dir,
            "TRITON_LIBCUDA_PATH": self.libcuda_dir,
            "TRITON_CACHE_DIR": "/tmp/triton-cache",  # noqa: S108 - the private tmpfs
        }


def assigned_index(environ: dict[str, str] | None = None) -> int:
    """The device this worker judges on: the first of CUDA_VISIBLE_DEVICES when it is
    a number, else 0."""
    visible = (environ if environ is not None else os.environ).get("CUDA_VISIBLE_DEVICES", "")
    first = visible.split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def find_libcuda(ldconfig: str | None = None) -> str | None:
    """The folder holding the driver's ``libcuda.so.1`` (``ldconfig -p``), or None."""
    exe = ldconfig or shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        out = subprocess.run(
            [exe, "-p"], capture_output=True, text=True, timeout=LDCONFIG_TIMEOUT_S, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    arch = LDCONFIG_ARCH.get(platform.machine(), "")
    for line in out.splitlines():
        m = re.match(r"\s*libcuda\.so\.1 \(([^)]*)\) => (\S+)", line)
        if m and arch in m.group(1):  # not a 32-bit copy beside it
            return str(Path(os.path.realpath(m.group(2))).parent)
    return None


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def detect(
    dev: Path = DEV,
    index: int | None = None,
    cuda_available: Callable[[], bool] = _cuda_available,
    libcuda_dir: Callable[[], str | None] = find_libcuda,
) -> GpuAccess | None:
    """The GPU access a Triton sandbox gets here, or None (a CPU worker): the device
    nodes must exist, torch must see a CUDA device and the driver library be found."""
    index = assigned_index() if index is None else index
    wanted = [*CONTROL_NODES, f"nvidia{index}"]
    if not all((dev / name).exists() for name in wanted):
        return None
    if not cuda_available():
        return None
    lib = libcuda_dir()
    if lib is None:
        return None
    nodes = tuple((str(dev / name), f"/dev/{name}") for name in wanted)
    return GpuAccess(nodes=nodes, libcuda_dir=lib, index=index)
