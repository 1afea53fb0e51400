"""Whether the install built the native k-quant kernel (``labs/quant/_kquants.c``).

pip builds it where a C compiler and Python's headers are (``optional = true`` in
pyproject.toml: without them the install still succeeds). Without it q4_k and q6_k
quantize through the torch pipeline: the same bytes, about 20x slower. Found without
importing the extension or torch, so the web process can ask at start-up.
"""

from __future__ import annotations

import importlib.util
import shutil
import sysconfig
from pathlib import Path

SLOWDOWN = "about 20x"
FIX = (
    "install a C compiler and Python's headers (Debian: apt-get install gcc python3-dev), "
    "then rebuild: rm .venv/.installed && make install"
)


def kernel_built() -> bool:
    return importlib.util.find_spec("labs.quant._kquants") is not None


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
        "the native k-quant kernel (labs/quant/_kquants.c) was not built, so q4_k and q6_k "
        f"quantization in labs runs {SLOWDOWN} slower (the same bytes). To fix: {FIX}"
    )
