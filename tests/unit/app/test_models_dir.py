"""``models_dir``: one setting, passed down to the labs as the variable they read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.settings import Settings, pass_models_dir_to_labs
from labs.lm import models
from labs.runtime.limits import KEEP_ENV


def test_the_setting_is_read_from_the_variable_the_labs_read() -> None:
    prefix = Settings.model_config.get("env_prefix", "")
    assert f"{prefix}models_dir".upper() == models.MODELS_ENV
    assert models.MODELS_ENV in KEEP_ENV  # it reaches the sandboxed lab child


def test_a_setting_built_in_code_reaches_the_labs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(models.MODELS_ENV, raising=False)
    shutil.copytree(models.SHIPPED_DIR, tmp_path / "copy")
    assert "copy" not in models.available()
    pass_models_dir_to_labs(Settings(models_dir=tmp_path))
    assert models.available()["copy"] == tmp_path / "copy"
    pass_models_dir_to_labs(Settings(models_dir=None))
    assert "copy" not in models.available()
