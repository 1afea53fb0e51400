"""Torch-free facts about a checkpoint, for validating lab parameters in the web process.

From ``config.json`` alone: the decoder's linear layers (Llama, Qwen2 and Mistral
name them alike), each one's input width, and how many held-out tokens exist
(``lowbit.json``, written at training time). Imports no torch.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any, Literal

from labs.catalog.formats import QUANT_BLOCK_SIZES
from labs.catalog.models import ATTENTION, MLP, ModelConfig
from labs.lm import models

KINDS = tuple(n.split(".")[1] for n in ATTENTION + MLP)  # q_proj … down_proj
META_FILE = "lowbit.json"
# Windows whose per-window KL a model lab stores, so two runs can be compared window by
# window (about 20 KB of JSON); beyond it the result stays small and runs are not paired.
MAX_PAIRED_WINDOWS = 1024

#: Formats that take a ``granularity`` option ("tensor", "channel" or a block size).
GRANULAR = ("int8", "int4", "fp8_e4m3", "fp8_e5m2")
Granularity = Literal["default", "tensor", "channel"] | int


def format_options(fmt: str, granularity: str | int) -> dict[str, Any]:
    """labs.quant options for ``fmt`` at ``granularity`` ("default": the format's own)."""
    if granularity == "default":
        return {}
    if fmt not in GRANULAR:
        raise ValueError(
            f"granularity {granularity!r} applies only to {', '.join(GRANULAR)}; "
            f"{fmt} has its own fixed blocks"
        )
    return {"granularity": granularity}


def block_of(fmt: str, granularity: str | int) -> int | None:
    """Elements per block along a row for ``fmt`` at ``granularity``."""
    if isinstance(granularity, int):
        return granularity
    if granularity in ("tensor", "channel"):
        return None
    return QUANT_BLOCK_SIZES[fmt]


def label(fmt: str, granularity: str | int) -> str:
    if granularity == "default":
        return fmt
    return f"{fmt} g{granularity}" if isinstance(granularity, int) else f"{fmt} per-{granularity}"


def matches(name: str, pattern: str) -> bool:
    """A name pattern: glob on the full name, or a part of it (``down_proj``, ``layers.0.*``)."""
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, f"*{pattern}*")


def select(names: list[str], keep: list[str]) -> tuple[list[str], list[str]]:
    """(quantized, kept) names; raises ValueError naming a pattern that matches nothing."""
    for p in keep:
        if not any(matches(n, p) for n in names):
            raise ValueError(
                f"pattern {p!r} matches no selected tensor; names look like {names[0]!r} "
                f"(kinds: {', '.join(KINDS)})"
            )
    kept = [n for n in names if any(matches(n, p) for p in keep)]
    return [n for n in names if n not in kept], kept


def block_problem(spec: ModelConfig, names: list[str], fmt: str, block: int | None) -> str | None:
    """Why ``fmt`` cannot quantize ``names`` of this model, or None."""
    if block is None:
        return None
    for n in names:
        w = spec.in_width(n)
        if w % block:
            return f"{fmt} blocks of {block} do not divide {n}'s input width {w}"
    return None


def load_spec(name: str) -> ModelConfig:
    """The model's shapes from its config.json, with the token counts of its lowbit.json
    (raises models.ModelError for a missing or corrupt one)."""
    d = models.resolve(name)
    cfg = models.check_dir(d)
    meta: dict[str, Any] = {}
    if (d / META_FILE).is_file():
        try:
            meta = json.loads((d / META_FILE).read_text(encoding="utf-8"))
        except ValueError:
            meta = {}
    try:
        return ModelConfig.from_config(
            name,
            cfg,
            path=d,
            heldout_tokens=meta.get("heldout_tokens"),
            calibration_tokens=meta.get("calibration_tokens"),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise models.ModelError(f"model {name}: config.json lacks {e}") from e
