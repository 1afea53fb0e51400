"""The warm parent's set-up: import once what every run would otherwise pay for.

A cold ``import torch`` costs seconds; the worker calls ``preload()`` once, does no
tensor work, and forks a child per run (see ``executor``).
"""

from __future__ import annotations

import gc
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
    # labs.quant loads its format classes (and the native extension) on first use:
    # without these every run paid for that import, 0.1 s here (issue 20).
    "labs.quant.formats",
    "labs.quant.core",
    "labs.quant.parallel",
    "labs.quant.metrics",
    "tokenizers",
    "labs.lm.hf",  # transformers, without torchao's start-up warnings
    "transformers.models.llama.modeling_llama",
    "transformers.integrations.sdpa_attention",
    "labs.viz.charts",
    # What the model labs import inside their run functions (definitions only, no tensor
    # work at import): without these every model-lab child imported them again.
    "labs.lm.batches",
    "labs.lm.calibrate",
    "labs.lm.card",
    "labs.lm.corpus",
    "labs.lm.evaluate",
    "labs.lm.fakequant",
    "labs.lm.intervals",
    "labs.lm.kvcache",
    "labs.lm.reference",
    "labs.quant.awq",
    "labs.quant.gptq",
    "labs.viz.model_charts",
    "encodings.idna",
    "json",
    "subprocess",
    "shlex",
)


def preload() -> dict[str, str]:
    """Import the numeric stack and every lab module, and draw one chart; returns what
    failed (module name, or "chart")."""
    import matplotlib

    matplotlib.use("Agg")
    failed: dict[str, str] = {}
    for name in (*PRELOAD, *_lab_modules()):
        try:
            importlib.import_module(name)
        except Exception as e:  # a missing optional module must not stop the worker
            failed[name] = f"{type(e).__name__}: {e}"
    try:  # instantiates every format once, here rather than in each child
        from labs.quant import FORMATS  # noqa: F401
    except Exception as e:
        failed["labs.quant.FORMATS"] = f"{type(e).__name__}: {e}"
    try:  # the shipped model's texts, tokenized once for every model-lab run
        from labs.lm.session import warm_token_ids

        warm_token_ids()
    except Exception as e:  # a broken model directory is the run's error, not ours
        failed["token ids"] = f"{type(e).__name__}: {e}"
    try:
        warm_model_loading()
    except Exception as e:  # transformers moved it: the runs pay, nothing breaks
        failed["model loading"] = f"{type(e).__name__}: {e}"
    try:
        warm_charts()
    except Exception as e:  # a chart that cannot be drawn is the run's error, not ours
        failed["chart"] = f"{type(e).__name__}: {e}"
    # Everything imported so far lives as long as the process: out of the collector's
    # sight, so a child's full collection walks its own objects, not the ~400k of torch
    # and transformers (0.25 s a collection here, and matplotlib triggers them), and
    # the pages the fork shares are not dirtied by collection bookkeeping.
    gc.collect()
    gc.freeze()
    return failed


def _lab_modules() -> list[str]:
    """The registered labs (each imports its own ``present``): each would otherwise be
    imported again by every child."""
    from labs.registry import LAB_MODULES

    return list(LAB_MODULES)


def warm_model_loading() -> None:
    """Build transformers' table of checkpoint renamings (~900 regular expressions, pure
    Python) that its first ``from_pretrained`` in a process builds and caches: without
    it every model-lab run paid 0.18 s of regex compiling here before loading a weight."""
    from transformers import conversion_mapping

    conversion_mapping.get_checkpoint_conversion_mapping("llama")


def warm_charts() -> None:
    """Draw one small chart of every kind of text the labs draw, so each child forks
    with matplotlib's font files opened and its glyph and layout caches filled: the
    first chart of a process measured 0.64 s here, later ones 0.08-0.12 s. Pure
    matplotlib and numpy (no torch op, no thread pool: the parent stays fork-safe)."""
    from labs.viz import charts

    charts.histogram([0.0, 1.0, 1.5, 3.0], title="Warm-up", value_label="x")
    charts.line_chart(
        {"a 1": ([1.0, 2.0, 4.0], [0.5, 1.5, 1.0])},
        title="Warm-up: 0.5 µs × 10³ − 2",
        x_label="x (log₂)",
        y_label="y",
        hlines={"limit": 1.25},
        log_x=True,
    )
    charts.bar_chart(["b", "c"], [1.0, 3.0], title="Warm-up", value_label="bytes", horizontal=False)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    from labs.quant.cpu import cpuinfo

    return cpuinfo().get("model name") or platform.processor() or platform.machine()
