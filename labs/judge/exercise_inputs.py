"""Seeded inputs for the exercises' tests.py: the same values on every run and machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def generator(seed: int) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(seed)


def normal(seed: int, n: int, *, std: float = 1.0, outliers: float | None = None) -> torch.Tensor:
    """``n`` float32 values ~ N(0, std²); with ``outliers``, one in 64 is that many times larger."""
    import torch

    g = generator(seed)
    x = torch.randn(n, generator=g) * std
    if outliers is not None:
        picks = torch.randperm(n, generator=g)[: max(1, n // 64)]
        x[picks] *= outliers
    return x


def ties_block(amax: float) -> torch.Tensor:
    """32 values whose amax is ``amax`` and whose x · (127 / amax) are the ties k + 0.5, k = -15..15.

    Exact in float32 when 127 / amax is a power of two (amax = 63.5: d = 0.5, id = 2).
    """
    import torch

    step = amax / 127
    ties = [(k + 0.5) * step for k in range(-15, 16)]
    return torch.tensor([amax, *ties], dtype=torch.float32)
