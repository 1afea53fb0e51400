"""The lab registry: lab id -> Lab. Importing it imports no torch."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from functools import cache

from labs.base import Lab

# One module per lab; adding a lab is one file plus one line here.
LAB_MODULES: tuple[str, ...] = (
    "labs.gpu_status",
    "labs.torch_env",
    "labs.block_quantize",
    "labs.memory_budget",
    "labs.qlora_budget",
    "labs.kv_capacity",
    "labs.fp8_savings",
    "labs.granularity_compare",
    "labs.scale_derivation",
    "labs.dot_product_scales",
    "labs.vram_observe",
    "labs.shard_doctor",
    "labs.format_support",
    "labs.reproducibility",
    "labs.model_quality",
    "labs.tensor_sensitivity",
    "labs.quant_algorithms",
    "labs.kv_quant",
)


def load_labs(modules: Iterable[str]) -> dict[str, Lab]:
    """Lab id -> Lab for ``modules``: each module's ``LAB``, or every lab of its ``LABS``."""
    labs: dict[str, Lab] = {}
    for name in modules:
        module = importlib.import_module(name)
        found = getattr(module, "LABS", None) or (module.LAB,)
        for lab in found:
            if lab.id in labs:
                raise RuntimeError(f"duplicate lab id {lab.id}")
            labs[lab.id] = lab
    return labs


@cache
def all_labs() -> dict[str, Lab]:
    """The registered labs (the production catalogue)."""
    return load_labs(LAB_MODULES)


def get_lab(lab_id: str) -> Lab | None:
    return all_labs().get(lab_id)


def lab_ids() -> set[str]:
    return set(all_labs())
