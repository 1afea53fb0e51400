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
on its calibration data (by the search's loss, whose rounding is below).

Then, as the reference ``auto_clip`` (llm-awq ``auto_clip.py``, AutoAWQ
``_compute_best_clip``), the clipping search: for each output row and quantization
group of the scaled weight, the largest magnitude ``m`` is shrunk to ``m·(1 − i/20)``
for ``i = 0…9``, the weights clamped to ``±m·(1 − i/20)`` and quantized, and the
shrink that best reproduces that group's share of the output ``x_g · w_gᵀ`` on 512
evenly strided calibration tokens (the inputs divided by ``s``) wins; ``i = 0`` is
no clipping. The reference skips ``q_proj`` and ``k_proj`` (their error passes
through the ``q·kᵀ`` product); the caller says which weights to clip.

The search's arithmetic: each α's loss is the squared *change* of an output. For the
MLP (``SwiGLU``, whose 20 α trials are the largest part of a quant-algorithms run) the
products are computed from the change itself, ``x · ΔWᵀ`` for gate and up and
``Δh · downᵀ``, and where the device multiplies bfloat16 natively (``search_dtype``)
they run in bfloat16: about half the time of float32 here. Their rounding (2⁻⁹) is
then relative to the change, which for a 4-bit format is ~16× smaller than the output
and for an 8-bit one ~256× smaller: with one input channel 30× the others, the loss is
within 5·10⁻⁴ of float64's for a 4-bit-sized change and 2·10⁻⁴ for an 8-bit-sized one,
where bfloat16 products of the whole outputs are 3 % and 170 % off (the test of this
module's search checks both), so it is finer than the references' float16 products of
whole outputs. On the shipped model every weight format the lab offers picks the same
α at every layer as the float32 search and gives bit-identical KLs. Two searches stay
in float32: a linear's own loss through ``XᵀX`` (summed over the tokens, its rounding
would be one fixed error in the metric, and a salient channel's entry dominates it:
1.5·10⁻³ of the loss in a test), and the clipping search (its argmin is per row and
group of 128 weights, where bfloat16 flipped near-ties).
Imports torch; nothing from the rest of ``labs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from labs.quant.api import quantize

CLIP_GRID = 20  # the reference's n_grid
CLIP_MAX_SHRINK = 0.5  # the reference's max_shrink: shrinks i/20 for i < 10
CLIP_TOKENS = 512  # the reference's n_sample_token
MAX_ROWS = 4096  # calibration tokens the scale search reads at most


def search_rows(n: int, max_rows: int = MAX_ROWS) -> torch.Tensor | None:
    """Which of ``n`` calibration tokens the scale search reads: ``max_rows`` evenly
    spaced ones (sorted, distinct), which keeps it cheap and deterministic; None for all
    of them when there are no more than that."""
    return None if n <= max_rows else torch.linspace(0, n - 1, max_rows).long()


def search_dtype(device: torch.device | str) -> torch.dtype:
    """The dtype of the products that score a ``SwiGLU`` block's α trials on ``device``:
    bfloat16 where it multiplies bfloat16 natively (a CUDA device that supports it; a CPU
    with AVX-512 BF16 or AMX-BF16), else float32 (bfloat16 emulated would be slower)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    if device.type == "cpu":
        from labs.quant.cpu import bf16_native

        return torch.bfloat16 if bf16_native() else torch.float32
    return torch.float32


class SwiGLU:
    """A LLaMA MLP after its gate and up projections, ``(silu(x Gᵀ) ⊙ (x Uᵀ)) Dᵀ``: the
    module whose output AWQ's search for ``gate_proj``/``up_proj`` preserves (``D`` is the
    unquantized ``down_proj``). Called as ``block(x, [G, U])``, its output."""

    def __init__(self, down: torch.Tensor) -> None:
        self.down = down.float()

    def __call__(self, x: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
        import torch.nn.functional as F

        return (F.silu(x @ ws[0].T) * (x @ ws[1].T)) @ self.down.T

    def change_loss(
        self, x: torch.Tensor, originals: list[torch.Tensor], dtype: torch.dtype
    ) -> Callable[[list[torch.Tensor]], float]:
        """``loss([Ĝ, Û])`` = mean((block(x, [G, U]) − block(x, [Ĝ, Û]))²), from the change:
        ``x·ΔWᵀ`` (gate and up as one product) and ``Δh·Dᵀ`` in ``dtype``, the SwiGLU of
        the changed pre-activations and ``Δh`` in float32. The unchanged pre-activations
        and ``h`` are computed once, in float32."""
        import torch.nn.functional as F

        g, u = x @ originals[0].T, x @ originals[1].T
        h = F.silu(g) * u
        xd, dd = x.to(dtype), self.down.to(dtype)
        w = torch.cat(originals)
        n = originals[0].shape[0]

        def loss(deq: list[torch.Tensor]) -> float:
            d = torch.mm(xd, (w - torch.cat(deq)).to(dtype).T)  # [t, 2·ff]
            # float32 − dtype is float32 of both (exact), with no float32 copy of d;
            # then in place: two [t, ff] temporaries a trial, not five.
            gq, uq = torch.sub(g, d[:, :n]), torch.sub(u, d[:, n:])
            dh = torch.sub(h, F.silu(gq, inplace=True).mul_(uq), out=uq)
            return float(torch.mm(dh.to(dtype), dd.T).float().square_().mean())

        return loss


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


def rows_independent(key: str, options: dict[str, Any], width: int) -> bool:
    """Whether rows of ``width`` quantized stacked get the bits each gets alone: no scale
    spans rows (one per tensor, as fp8's, or NVFP4's second level), and a flat layout's
    blocks end where a row does."""
    from labs.quant.api import get_format

    fmt = get_format(key, **options)
    if fmt.scale_scope == "tensor" or fmt.spec.two_level:
        return False
    return fmt.layout_kind == "rows" or width % (fmt.block_size or width) == 0


def clip_search(
    w: torch.Tensor, x: torch.Tensor, key: str, options: dict[str, Any], group: int | None
) -> torch.Tensor:
    """The reference's ``auto_clip`` for one (already scaled) weight ``w [out, in]`` given
    its (already divided) inputs ``x [n, in]``: the best ``max_val [out, groups]``.

    The candidate shrinks are tried together: the clamped weights of every shrink are
    stacked into one tensor, quantized in one call and multiplied in one ``bmm`` (row by
    row and group by group the same numbers as one shrink at a time). A format with a
    per-tensor scale would see the stack's maximum as its own, so it tries them in turn."""
    out, width = w.shape
    gs = group or width
    groups = width // gs
    x = x.reshape(-1, width).float()
    x = x[:: max(1, x.shape[0] // CLIP_TOKENS)]  # the reference's strided sample
    xg = x.reshape(x.shape[0], groups, gs).permute(1, 2, 0)  # [g, k, t]
    wf = w.float()
    org_max = wf.reshape(out, groups, gs).abs().amax(-1)  # [o, g]
    n = int(CLIP_MAX_SHRINK * CLIP_GRID)
    shrinks = torch.tensor([1 - i / CLIP_GRID for i in range(n)], dtype=wf.dtype)
    max_vals = org_max[None] * shrinks.to(wf.device)[:, None, None]  # [c, o, g]
    stacked = rows_independent(key, options, width)

    def deq(c: slice) -> torch.Tensor:  # [c·o, in]: the clamped weights of shrinks c, quantized
        m = max_vals[c].reshape(-1, groups)
        clamped = clamp_groups(wf.repeat(m.shape[0] // out, 1), m)
        if stacked:
            return quantize(clamped, key, **options).dequantize()
        return torch.cat(
            [quantize(part, key, **options).dequantize() for part in clamped.split(out)]
        )

    # Each group's output error over the t tokens, mean_t((Δ x_g)²) = Δ · (x_gᵀ x_g) · Δᵀ / t:
    # one [k, k] matrix per group instead of a [c·o, t] product per group.
    gram = torch.bmm(xg, xg.transpose(1, 2))  # [g, k, k]
    diff = (deq(slice(0, n)) - wf.repeat(n, 1)).reshape(n * out, groups, gs).transpose(0, 1)
    err = (torch.bmm(diff, gram) * diff).sum(-1).reshape(groups, n, out) / xg.shape[-1]
    best = err.argmin(1).T  # [o, g]: the first of equal errors, as the reference's strict <
    return max_vals.gather(0, best[None]).squeeze(0)


def _trial_loss(
    x: torch.Tensor,
    originals: list[torch.Tensor],
    block: Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor] | None,
    dtype: torch.dtype,
) -> Callable[[list[torch.Tensor]], float]:
    """How ``awq`` scores one α's quantized weights ``deq`` on inputs ``x``: the mean
    squared change of ``block``'s output (a ``SwiGLU`` from its change, in ``dtype``), or
    without a block the sum of each linear's own."""
    if dtype != torch.float32 and isinstance(block, SwiGLU):
        return block.change_loss(x, originals, dtype)
    if block is not None:
        ref = block(x, originals)
        return lambda deq: float((ref - block(x, deq)).pow(2).mean())
    # Each linear's own output error, mean((x Wᵀ − x Ŵᵀ)²), is Σ (ΔW · XᵀX) ∘ ΔW / (n·out):
    # XᵀX once, then [out, in] × [in, in] per trial instead of [n, in] × [in, out] twice.
    gram = x.T @ x

    def loss(deq: list[torch.Tensor]) -> float:
        total = 0.0
        for w, d in zip(originals, deq, strict=True):
            dw = w - d
            total += float(((dw @ gram) * dw).sum()) / (x.shape[0] * w.shape[0])
        return total

    return loss


def awq(
    weights: list[torch.Tensor],
    x: torch.Tensor,
    key: str,
    options: dict[str, Any] | None = None,
    *,
    n_grid: int = 20,
    max_rows: int = MAX_ROWS,
    block: Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor] | None = None,
    clip: Sequence[bool] | bool = True,
    dtype: torch.dtype | None = None,
) -> AWQResult:
    """Search one per-channel scale shared by ``weights`` (each ``[out_i, in]``, all fed the
    same input) from calibration inputs ``x [..., in]``, then the clipping of each weight
    marked in ``clip``, and quantize each with both.

    ``block(x, weights)`` is the output the search should preserve (the reference
    compares the whole module's output, e.g. the MLP after ``down_proj``); by default
    each linear's own output ``x Wᵢᵀ``. ``n_grid=1`` searches no scale (``α = 0``: round
    to nearest, with clipping where asked). ``dtype``: the products of a ``SwiGLU``
    block's α losses, computed from the change of its output (``search_dtype`` of the
    device by default; see the module's docstring); with float32, or another block, or
    none, each loss is a difference of float32 outputs, as the references compute it."""
    from labs.quant.api import get_format
    from labs.quant.parallel import map_chunks

    opts = dict(options or {})
    x_all = x.reshape(-1, x.shape[-1]).float()
    x = x_all
    rows = search_rows(x.shape[0], max_rows)
    if rows is not None:
        x = x[rows]
    x_mean = x.abs().mean(0)

    originals = [w.float() for w in weights]
    loss = _trial_loss(x, originals, block, dtype or search_dtype(x.device))

    # Linears that share the input are quantized as one stacked matrix when that changes
    # no row's bits: one call a trial instead of one per linear.
    stacked = (
        torch.cat(originals)
        if len(weights) > 1 and rows_independent(key, opts, x.shape[-1])
        else None
    )
    sizes = [w.shape[0] for w in weights]

    def trial(alpha: float) -> tuple[float, torch.Tensor]:
        s = x_mean.pow(alpha).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        if stacked is not None:
            return loss(list(fake_quantize_scaled(stacked, s, key, opts)[0].split(sizes))), s
        return loss([fake_quantize_scaled(w, s, key, opts)[0] for w in weights]), s

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
