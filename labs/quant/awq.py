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
on its calibration data.

Then, as the reference ``auto_clip`` (llm-awq ``auto_clip.py``, AutoAWQ
``_compute_best_clip``), the clipping search: for each output row and quantization
group of the scaled weight, the largest magnitude ``m`` is shrunk to ``m·(1 − i/20)``
for ``i = 0…9``, the weights clamped to ``±m·(1 − i/20)`` and quantized, and the
shrink that best reproduces that group's share of the output ``x_g · w_gᵀ`` on 512
evenly strided calibration tokens (the inputs divided by ``s``) wins; ``i = 0`` is
no clipping. The reference skips ``q_proj`` and ``k_proj`` (their error passes
through the ``q·kᵀ`` product); the caller says which weights to clip.
Imports torch; nothing from the rest of ``labs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from labs.quant import quantize

CLIP_GRID = 20  # the reference's n_grid
CLIP_MAX_SHRINK = 0.5  # the reference's max_shrink: shrinks i/20 for i < 10
CLIP_TOKENS = 512  # the reference's n_sample_token


@dataclass
class AWQResult:
    weights: list[torch.Tensor]  # float32, Q(clip(W·s))/s for each input weight
    nbytes: list[int]  # stored bytes of each Q(clip(W·s)) in the format
    scales: torch.Tensor  # s [in], float32
    alpha: float  # the chosen exponent
    losses: list[float]  # output MSE for each α on the grid
    clipped: list[float]  # share of (row, group) maxima each weight's clip search shrank


def fake_quantize_scaled(
    w: torch.Tensor,
    s: torch.Tensor,
    key: str,
    options: dict[str, Any],
    max_val: torch.Tensor | None = None,
) -> tuple[torch.Tensor, int]:
    """``Q(w · s) / s`` (clamped first to ``±max_val`` per row and group, if given) and
    the stored bytes of ``Q(w · s)``."""
    ws = w.float() * s[None, :]
    if max_val is not None:
        ws = clamp_groups(ws, max_val)
    q = quantize(ws, key, **options)
    return q.dequantize() / s[None, :], int(q.nbytes)


def clamp_groups(w: torch.Tensor, max_val: torch.Tensor) -> torch.Tensor:
    """``w [out, in]`` clamped to ``±max_val [out, groups]`` group by group."""
    out, groups = max_val.shape
    g = w.reshape(out, groups, -1)
    m = max_val[:, :, None]
    return torch.maximum(torch.minimum(g, m), -m).reshape(w.shape)


def clip_search(
    w: torch.Tensor, x: torch.Tensor, key: str, options: dict[str, Any], group: int | None
) -> torch.Tensor:
    """The reference's ``auto_clip`` for one (already scaled) weight ``w [out, in]`` given
    its (already divided) inputs ``x [n, in]``: the best ``max_val [out, groups]``."""
    out, width = w.shape
    gs = group or width
    x = x.reshape(-1, width).float()
    x = x[:: max(1, x.shape[0] // CLIP_TOKENS)]  # the reference's strided sample
    xg = x.reshape(x.shape[0], width // gs, gs)  # [t, g, k]
    wg = w.float().reshape(out, width // gs, gs)  # [o, g, k]

    def group_out(v: torch.Tensor) -> torch.Tensor:  # each group's share of x·vᵀ: [g, o, t]
        return torch.bmm(v.transpose(0, 1), xg.permute(1, 2, 0))

    org_max = wg.abs().amax(-1)  # [o, g]
    org_out = group_out(wg)
    best = org_max.clone()
    min_err = torch.full_like(org_max, 1e9)
    for i in range(int(CLIP_MAX_SHRINK * CLIP_GRID)):
        max_val = org_max * (1 - i / CLIP_GRID)
        q = quantize(clamp_groups(w.float(), max_val), key, **options).dequantize()
        err = (group_out(q.reshape(out, width // gs, gs)) - org_out).pow(2).mean(-1).T
        better = err < min_err
        min_err[better] = err[better]
        best[better] = max_val[better]
    return best


def awq(
    weights: list[torch.Tensor],
    x: torch.Tensor,
    key: str,
    options: dict[str, Any] | None = None,
    *,
    n_grid: int = 20,
    max_rows: int = 4096,
    block: Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor] | None = None,
    clip: Sequence[bool] | bool = True,
) -> AWQResult:
    """Search one per-channel scale shared by ``weights`` (each ``[out_i, in]``, all fed the
    same input) from calibration inputs ``x [..., in]``, then the clipping of each weight
    marked in ``clip``, and quantize each with both.

    ``block(x, weights)`` is the output the search should preserve (the reference
    compares the whole module's output, e.g. the MLP after ``down_proj``); by default
    each linear's own output ``x Wᵢᵀ``. ``n_grid=1`` searches no scale (``α = 0``: round
    to nearest, with clipping where asked)."""
    from labs.quant import get_format
    from labs.quant.parallel import map_chunks

    opts = dict(options or {})
    x_all = x.reshape(-1, x.shape[-1]).float()
    x = x_all
    if x.shape[0] > max_rows:  # evenly spaced rows keep the search cheap and deterministic
        x = x[torch.linspace(0, x.shape[0] - 1, max_rows).long()]
    x_mean = x.abs().mean(0)

    def outputs(ws: list[torch.Tensor]) -> list[torch.Tensor]:
        return [block(x, ws)] if block is not None else [x @ w.T for w in ws]

    refs = outputs([w.float() for w in weights])

    def trial(alpha: float) -> tuple[float, torch.Tensor]:
        s = x_mean.pow(alpha).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        deq = [fake_quantize_scaled(w, s, key, opts)[0] for w in weights]
        return sum(float((r - o).pow(2).mean()) for r, o in zip(refs, outputs(deq), strict=True)), s

    # Each α is independent: on the CPU the grid is spread over the run's cores.
    on_cpu = x.device.type == "cpu"
    alphas = [i / n_grid for i in range(n_grid)]
    tried = map_chunks(trial, alphas) if on_cpu else [trial(a) for a in alphas]
    losses = [loss for loss, _ in tried]
    k = min(range(n_grid), key=lambda i: (losses[i], i))  # first best, as the reference
    alpha, s = alphas[k], tried[k][1]
    flags = [clip] * len(weights) if isinstance(clip, bool) else list(clip)
    group = get_format(key, **opts).block_size
    x_scaled = x_all / s[None, :]

    def finish(j: int) -> tuple[torch.Tensor, int, float]:
        w = weights[j]
        if not flags[j]:
            return (*fake_quantize_scaled(w, s, key, opts), 0.0)
        max_val = clip_search(w.float() * s[None, :], x_scaled, key, opts, group)
        shrunk = float(
            (max_val < (w.float() * s[None, :]).reshape(*max_val.shape, -1).abs().amax(-1))
            .float()
            .mean()
        )
        return (*fake_quantize_scaled(w, s, key, opts, max_val), shrunk)

    out = (
        map_chunks(finish, range(len(weights)))
        if on_cpu
        else [finish(j) for j in range(len(weights))]
    )
    return AWQResult(
        [o[0] for o in out], [o[1] for o in out], s, alpha, losses, [o[2] for o in out]
    )
