"""Which labs this deployment offers: the registry, plus any extra lab modules the
settings name (``LOWBIT_EXTRA_LAB_MODULES``). Only the tests set that, to offer the
sandbox probes (``labs.runtime.probe``); production offers the registry alone."""

from __future__ import annotations

from collections.abc import Mapping

from app.settings import Settings
from labs.base import Lab
from labs.registry import all_labs, load_labs

LabCatalogue = Mapping[str, Lab]


def lab_catalogue(settings: Settings) -> dict[str, Lab]:
    """Every registered lab, then the labs of ``settings.extra_lab_module_names``;
    an extra lab may not reuse a registered id."""
    labs = dict(all_labs())
    extra = load_labs(settings.extra_lab_module_names)
    clash = sorted(set(extra) & set(labs))
    if clash:
        raise RuntimeError(f"extra lab modules reuse registered lab ids: {', '.join(clash)}")
    labs.update(extra)
    return labs
