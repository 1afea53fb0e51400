"""Which language models the labs offer, and loading one with ``transformers``.

``available()`` imports no torch (the web process lists the ``model`` choices with
it): the shipped ``lowbit-tiny`` plus every Hugging Face checkpoint directory under
``LOWBIT_MODELS_DIR`` (one folder per model holding ``config.json``, ``*.safetensors``
and ``tokenizer.json``; Llama, Qwen and Mistral load the same way). The variable is how
the app's ``models_dir`` setting reaches the labs: labs never import ``app``, and the
lab sandbox keeps this variable (``app.settings.pass_models_dir_to_labs`` writes it). A checkpoint
without its own ``heldout.txt``/``calibration.txt`` is evaluated on the shipped ones.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHIPPED = "lowbit-tiny"
SHIPPED_DIR = Path(__file__).resolve().parent / SHIPPED
MODELS_ENV = "LOWBIT_MODELS_DIR"
HELDOUT_FILE = "heldout.txt"
CALIBRATION_FILE = "calibration.txt"


class ModelError(ValueError):
    """A model directory that is missing, incomplete or corrupt; the message says which file."""


def models_dir() -> Path | None:
    d = os.environ.get(MODELS_ENV)
    return Path(d) if d else None


def available(extra_dir: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Model name -> directory: ``lowbit-tiny`` first, then ``LOWBIT_MODELS_DIR``'s folders."""
    found = {SHIPPED: SHIPPED_DIR}
    root = Path(extra_dir) if extra_dir else models_dir()
    if root is not None and root.is_dir():
        for d in sorted(root.iterdir()):
            if d.name != SHIPPED and (d / "config.json").is_file():
                found[d.name] = d
    return found


def resolve(name: str, extra_dir: str | os.PathLike[str] | None = None) -> Path:
    models = available(extra_dir)
    if name not in models:
        raise ModelError(f"unknown model {name!r}; available: {sorted(models)}")
    return models[name]


def check_dir(d: Path) -> dict[str, Any]:
    """Raise ModelError unless ``d`` holds a readable checkpoint; returns its config."""
    if not d.is_dir():
        raise ModelError(f"model directory {d.name} is missing")
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise ModelError(f"model {d.name}: config.json is missing")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"model {d.name}: config.json is not valid JSON ({e})") from e
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise ModelError(f"model {d.name}: config.json has no model_type")
    if not list(d.glob("*.safetensors")):
        raise ModelError(f"model {d.name}: no *.safetensors weights")
    if not (d / "tokenizer.json").is_file():
        raise ModelError(f"model {d.name}: tokenizer.json is missing")
    return cfg


def text_file(d: Path, name: str) -> Path:
    """``d/name`` when the checkpoint has its own, else the shipped model's."""
    own = d / name
    return own if own.is_file() else SHIPPED_DIR / name


@dataclass
class Loaded:
    """A loaded model and tokenizer with the directory they came from."""

    name: str
    path: Path
    model: Any  # transformers PreTrainedModel, in eval mode
    tokenizer: Any  # tokenizers.Tokenizer
    dtype: Any  # torch dtype of the weights


def load(name: str, device: str = "cpu", extra_dir: str | os.PathLike[str] | None = None) -> Loaded:
    """Load ``name`` with ``AutoModelForCausalLM``; float32 on a CPU, bfloat16 on a GPU
    for checkpoints stored in 16 bits. Errors name the broken file."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory never needs the hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from tokenizers import Tokenizer

    from labs.lm.hf import transformers  # filters torchao's start-up noise first

    AutoModelForCausalLM = transformers.AutoModelForCausalLM
    transformers.utils.logging.disable_progress_bar()  # a lab streams its own progress

    d = resolve(name, extra_dir)
    cfg = check_dir(d)
    stored = str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32")
    dtype = (
        torch.bfloat16 if device == "cuda" and stored in ("bfloat16", "float16") else torch.float32
    )
    try:
        tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    except Exception as e:  # tokenizers raises its own Exception type on a corrupt file
        raise ModelError(f"model {d.name}: tokenizer.json cannot be read ({e})") from e
    try:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, local_files_only=True)
    except Exception as e:  # safetensors/transformers raise many types for a corrupt file
        raise ModelError(
            f"model {d.name}: weights cannot be loaded ({type(e).__name__}: {e})"
        ) from e
    model.to(device).eval()  # type: ignore[arg-type]
    return Loaded(name, d, model, tok, dtype)
