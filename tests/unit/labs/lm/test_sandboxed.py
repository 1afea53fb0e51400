"""A model lab through the real sandbox, forked from a warm parent as the worker does."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from labs.lm import models
from tests.unit.labs.runtime._warm_parent import WarmParent


def test_the_warm_parent_preloads_transformers() -> None:
    from labs.runtime.warm import PRELOAD

    assert "labs.lm.hf" in PRELOAD and "tokenizers" in PRELOAD  # transformers, quietly


def test_model_labs_run_sandboxed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # LOWBIT_MODELS_DIR reaches the sandboxed child; the folder must be readable by the
    # unprivileged sandbox user and outside /tmp (the child gets a private /tmp).
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else "/var/tmp"  # noqa: S108
    extra = Path(tempfile.mkdtemp(prefix="lowbit-models-", dir=shm))
    try:
        extra.chmod(0o755)
        broken = extra / "broken"
        shutil.copytree(models.SHIPPED_DIR, broken)
        weights = (broken / "model.safetensors").read_bytes()
        (broken / "model.safetensors").write_bytes(weights[: len(weights) // 3])
        for p in [broken, *broken.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        monkeypatch.setenv(models.MODELS_ENV, str(extra))
        wp = WarmParent(tmp_path, "s" * 40)
        try:
            ok = wp.run({"lab": "model-quality", "params": {"eval_tokens": 512, "format": "q8_0"}})
            bad = wp.run({"lab": "kv-quant", "params": {"eval_tokens": 512, "model": "broken"}})
        finally:
            wp.close()
    finally:
        shutil.rmtree(extra, ignore_errors=True)
    assert ok["status"] == "succeeded", ok["error"]
    assert ok["result"]["kl_divergence"] < 0.01
    assert bad["status"] == "failed"
    assert "weights cannot be loaded" in bad["error"]
