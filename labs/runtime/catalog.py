"""Which labs this deployment offers: the registry, plus the sandbox probes in tests."""

from __future__ import annotations

from app.settings import Settings
from labs.base import Lab
from labs.registry import all_labs


def available_labs(settings: Settings) -> dict[str, Lab]:
    """Every registered lab; with ``env == "test"`` also the sandbox probes, which
    exist to prove the sandbox holds and are never offered anywhere else."""
    labs = dict(all_labs())
    if settings.env == "test":
        from labs.runtime.probe import PROBES

        labs.update({lab.id: lab for lab in PROBES})
    return labs


def get_available_lab(settings: Settings, lab_id: str) -> Lab | None:
    return available_labs(settings).get(lab_id)
