"""The warm parent's set-up: import once what every run would otherwise pay for.

A cold ``import torch`` costs seconds; the worker calls ``preload()`` once, does no
tensor work, and forks a child per run (see ``executor``).
"""

from __future__ import annotations

import importlib
import platform

# Imported once in the parent so no run pays for them.
PRELOAD = (
    "torch",
    "torch.nn.functional",
    "numpy",
    "safetensors",
    "safetensors.torch",
    "matplotlib",
    "matplotlib.figure",
    "matplotlib.font_manager",
    "matplotlib.backends.backend_svg",
    "matplotlib.backends.backend_agg",
    "labs.quant",
    "labs.quant.metrics",
    "tokenizers",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.integrations.sdpa_attention",
    "labs.plots",
    "encodings.idna",
    "json",
    "subprocess",
    "shlex",
)


def preload() -> dict[str, str]:
    """Import the numeric stack and every lab module; returns modules that failed."""
    import matplotlib

    matplotlib.use("Agg")
    failed: dict[str, str] = {}
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as e:  # a missing optional module must not stop the worker
            failed[name] = f"{type(e).__name__}: {e}"
    return failed


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
