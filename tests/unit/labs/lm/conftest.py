"""The shipped model, loaded once per test module (a module's tests may edit its
weights and put them back; another module starts from a fresh copy)."""

from __future__ import annotations

import pytest
import torch

from labs.lm import models


@pytest.fixture(scope="module")
def loaded() -> models.Loaded:
    torch.set_num_threads(1)
    return models.load(models.SHIPPED)
