"""Bad input: each a clear per-field message (web validation) or a failed run that says why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from labs.base import InvalidParams
from labs.lm import models, spec
from labs.registry import get_lab
from tests.unit.labs.helpers import run_lab

MODEL_LABS = ("model-quality", "tensor-sensitivity", "quant-algorithms", "kv-quant")


def errors(lab_id: str, data: dict) -> dict[str, str]:
    """The form's per-field messages for ``data`` (which must be refused)."""
    lab = get_lab(lab_id)
    assert lab is not None
    with pytest.raises(InvalidParams) as refused:
        lab.validate(data)
    return refused.value.errors


@pytest.mark.parametrize("lab_id", MODEL_LABS)
def test_every_param_has_a_default_and_a_description(lab_id: str) -> None:
    lab = get_lab(lab_id)
    assert lab is not None
    for name, field in lab.params.model_fields.items():
        assert field.description and not field.is_required(), name
    lab.params.model_validate({})


def test_unknown_tensor_pattern() -> None:
    assert "matches no selected tensor" in errors("model-quality", {"keep": ["w_qkv"]})["keep"]
    # A pattern outside the selected kind matches nothing there either.
    errs = errors("model-quality", {"tensors": "attention", "keep": ["down_proj"]})
    assert "matches no" in errs["keep"]


def test_a_block_that_does_not_divide_a_width() -> None:
    errs = errors("model-quality", {"format": "int4", "granularity": 100})
    assert "do not divide" in errs["granularity"]
    errs = errors("model-quality", {"format": "q4_0", "granularity": 64})
    assert "applies only to" in errs["granularity"]
    assert "do not divide head_dim" in errors("kv-quant", {"kv_format": "q4_k"})["kv_format"]
    errs = errors("kv-quant", {"granularity": "kivi", "group": 48, "kv_format": "int4"})
    assert "do not divide context" in errs["group"]


def test_eval_tokens_beyond_the_heldout_text() -> None:
    held = spec.load_spec(models.SHIPPED).heldout_tokens
    assert held is not None
    errs = errors("model-quality", {"eval_tokens": held + 1, "context": 256})
    assert "beyond" in errs["eval_tokens"]
    errs = errors("kv-quant", {"eval_tokens": 100, "context": 256})
    assert "at least one window" in errs["eval_tokens"]
    assert (
        "beyond" in errors("quant-algorithms", {"calibration_tokens": 65_536})["calibration_tokens"]
    )


def test_unknown_model() -> None:
    assert "unknown model" in errors("kv-quant", {"model": "llama-9000"})["model"]


@pytest.fixture()
def models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(models.MODELS_ENV, str(tmp_path))
    return tmp_path


def test_a_missing_file_is_named(models_dir: Path) -> None:
    d = models_dir / "broken"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert "no *.safetensors" in errors("model-quality", {"model": "broken"})["model"]


def test_a_corrupt_config_is_named(models_dir: Path) -> None:
    d = models_dir / "broken"
    d.mkdir()
    (d / "config.json").write_text("{not json")
    assert "config.json is not valid JSON" in errors("model-quality", {"model": "broken"})["model"]


def test_corrupt_weights_fail_the_run_with_the_reason(models_dir: Path) -> None:
    d = models_dir / "truncated"
    shutil.copytree(models.SHIPPED_DIR, d)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.raises(models.ModelError, match="weights cannot be loaded"):
        run_lab("model-quality", {"model": "truncated", "eval_tokens": 256})


def test_an_extra_checkpoint_is_offered_as_a_model(models_dir: Path) -> None:
    shutil.copytree(models.SHIPPED_DIR, models_dir / "copy")
    assert list(models.available()) == [models.SHIPPED, "copy"]
    res, _ = run_lab("kv-quant", {"model": "copy", "eval_tokens": 256})
    assert res.model == "copy" and res.kl_divergence > 0
