"""AWQ: activation-aware weight quantization (Lin et al. 2023, arXiv:2306.00978).

A few input channels carry much larger activations than the rest; the weights
that multiply them matter most. AWQ scales each input channel ``j`` of the
weights by ``s_j`` before rounding and divides the activation by ``s_j`` (in a
real checkpoint ``1/s`` is folded into the preceding RMSNorm or linear layer, so
the model computes the same function): ``Ŵ = Q(W · diag(s)) · diag(s)⁻¹``.
Larger ``s_j`` means finer relative steps for the salient channels.

As in the reference ``auto_scale`` search: ``s = mean|x|^α`` per channel,
normalised by ``sqrt(max(s)·min(s))``, with ``α`` on a grid of ``n_grid`` points
in ``[0, 1)``; the ``α`` whose quantized layers reproduce the calibration
outputs ``X Wᵀ`` best (mean squared error, summed over the layers that share
the input) wins. ``α = 0`` is plain round-to-nearest, so AWQ never does worse
on its calibration data. (The reference's weight-clipping search is left out.)
Imports torch; nothing from the rest of ``labs``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from labs.quant import quantize


@dataclass
class AWQResult:
    weights: list[torch.Tensor]  # float32, Q(W·s)/s for each input weight
    nbytes: list[int]  # stored bytes of each Q(W·s) in the format
    scales: torch.Tensor  # s [in], float32
    alpha: float  # the chosen exponent
    losses: list[float]  # output MSE for each α on the grid


def fake_quantize_scaled(
    w: torch.Tensor, s: torch.Tensor, key: str, options: dict[str, Any]
) -> tuple[torch.Tensor, int]:
    """``Q(w · s) / s`` and the stored bytes of ``Q(w · s)``."""
    q = quantize(w.float() * s[None, :], key, **options)
    return q.dequantize() / s[None, :], int(q.nbytes)


def awq(
    weights: list[torch.Tensor],
    x: torch.Tensor,
    key: str,
    options: dict[str, Any] | None = None,
    *,
    n_grid: int = 20,
    max_rows: int = 4096,
    block: Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor] | None = None,
) -> AWQResult:
    """Search one per-channel scale shared by ``weights`` (each ``[out_i, in]``, all fed the
    same input) from calibration inputs ``x [..., in]``, then quantize each with it.

    ``block(x, weights)`` is the output the search should preserve (the reference
    compares the whole module's output, e.g. the MLP after ``down_proj``); by default
    each linear's own output ``x Wᵢᵀ``."""
    opts = dict(options or {})
    x = x.reshape(-1, x.shape[-1]).float()
    if x.shape[0] > max_rows:  # evenly spaced rows keep the search cheap and deterministic
        x = x[torch.linspace(0, x.shape[0] - 1, max_rows).long()]
    x_mean = x.abs().mean(0)

    def outputs(ws: list[torch.Tensor]) -> list[torch.Tensor]:
        return [block(x, ws)] if block is not None else [x @ w.T for w in ws]

    refs = outputs([w.float() for w in weights])
    losses: list[float] = []
    best: tuple[float, float, torch.Tensor] | None = None
    for i in range(n_grid):
        alpha = i / n_grid
        s = x_mean.pow(alpha).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        deq = [fake_quantize_scaled(w, s, key, opts)[0] for w in weights]
        loss = sum(float((r - o).pow(2).mean()) for r, o in zip(refs, outputs(deq), strict=True))
        losses.append(loss)
        if best is None or loss < best[0]:
            best = (loss, alpha, s)
    assert best is not None
    _, alpha, s = best
    out = [fake_quantize_scaled(w, s, key, opts) for w in weights]
    return AWQResult([o[0] for o in out], [o[1] for o in out], s, alpha, losses)
