"""Whether the install built the native kernels: the k-quant quantizer
(``labs/quant/_kquants.c``) and GPTQ's column loop (``labs/quant/_gptq.c``).

pip builds them where a C compiler and Python's headers are (``optional = true`` in
pyproject.toml: without them the install still succeeds). Without them q4_k and q6_k
quantize through the torch pipeline (the same bytes, about 20x slower) and GPTQ runs its
column loop in torch (the same numbers, about 2x slower). Found without importing the
extensions or torch, so the web process can ask at start-up.
"""

from __future__ import annotations

import importlib.util
import shutil
import sysconfig
from pathlib import Path

SLOWDOWN = "about 20x"
KERNELS = ("labs.quant._kquants", "labs.quant._gptq")
FIX = (
    "install a C compiler and Python's headers (Debian: apt-get install gcc python3-dev), "
    "then rebuild: rm .venv/.installed && make install"
)


def kernel_built() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in KERNELS)


def can_build_kernel() -> bool:
    """A C compiler on PATH and Python.h: what pip needs to build the kernel."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(cc) is not None and headers.is_file()


def missing_kernel_warning() -> str | None:
    """What to tell whoever starts the server or a worker when the kernel is missing."""
    if kernel_built():
        return None
    return (
        "the native kernels (labs/quant/_kquants.c, _gptq.c) were not built, so q4_k and q6_k "
        f"quantization in labs runs {SLOWDOWN} slower (the same bytes) and GPTQ about 2x "
        f"slower (the same numbers). To fix: {FIX}"
    )
