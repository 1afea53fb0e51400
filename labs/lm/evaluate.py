"""The evaluation contract of DESIGN.md, "The shipped language model".

Encode ``heldout.txt`` with ``tokenizer.json`` and no special tokens, take the
first ``eval_tokens`` ids, cut them into consecutive non-overlapping windows of
``context`` ids (a last partial window is dropped); in each window tokens 2..n
are predicted from those before them. Perplexity is exp(mean NLL over every
predicted token), ``kl_divergence`` the mean over predicted positions of
KL(p_reference || p_quantized) in nats, ``top1_agreement`` the share of
positions whose argmax agrees. Logits are taken in float32.

Memory is bounded whatever the number of windows: windows are scored batch by batch
and only per-window sums are kept (``Totals``); the reference model's
log-probabilities, which KL needs, are kept for the first windows only and recomputed
beyond (``labs.lm.reference``). Per-window sums are what the intervals and paired
comparisons of ``labs.lm.intervals`` need.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from labs.lm import intervals
from labs.lm.batches import (  # noqa: F401 - part of this module's API
    batch_starts,
    logprobs,
    marked_batch,
    run_batches,
    window_logits,
    windows,
)

if TYPE_CHECKING:
    from labs.lm.reference import ReferenceLogits


class Totals:
    """Per-window sums over the predicted positions of ``n`` windows (float64), filled in
    by window index so the result never depends on the order batches finish in."""

    def __init__(self, n: int, per_window: int, with_reference: bool) -> None:
        self.per_window = per_window  # predicted positions in each window (context - 1)
        self.nll_sums = torch.zeros(n, dtype=torch.float64)
        self.kl_sums = torch.zeros(n, dtype=torch.float64) if with_reference else None
        self.agree_counts = torch.zeros(n, dtype=torch.int64) if with_reference else None
        # KL at each position of each window, summed over windows by finish() (in window
        # order, so the sum does not depend on which batch finished first)
        self._kl_pos = torch.zeros(n, per_window, dtype=torch.float64) if with_reference else None
        self.kl_by_position: torch.Tensor | None = None  # [context-1]
        self.kl_positions: torch.Tensor | None = None  # [n, context-1]: each window's KL

    def add(self, first: int, logp: torch.Tensor, targets: torch.Tensor, ref: Any) -> None:
        """Score one batch (windows ``first…``) of log-probabilities ``logp`` against the
        reference's ``ref`` (or None)."""
        b = logp.shape[0]
        nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).double()
        self.nll_sums[first : first + b] = nll.sum(1).cpu()
        if ref is None:
            return
        assert self.kl_sums is not None and self.agree_counts is not None
        diff = ref - logp  # two vocab-sized temporaries per batch, not three
        kl = diff.mul_(ref.exp()).sum(-1).double()  # [b, t] nats
        self.kl_sums[first : first + b] = kl.sum(1).cpu()
        # max(-1).indices is argmax (the first of equal maxima) at a third of its cost here
        top = ref.max(-1).indices == logp.max(-1).indices
        self.agree_counts[first : first + b] = top.sum(1).cpu()
        assert self._kl_pos is not None
        self._kl_pos[first : first + b] = kl.cpu()

    def finish(self) -> Totals:
        """Called once every window is in."""
        if self._kl_pos is not None:
            self.kl_by_position = self._kl_pos.sum(0)
            self.kl_positions, self._kl_pos = self._kl_pos, None
        return self

    @property
    def windows(self) -> int:
        return int(self.nll_sums.numel())

    @property
    def count(self) -> int:
        """Predicted positions in all."""
        return self.windows * self.per_window

    @property
    def nll(self) -> float:
        return float(self.nll_sums.sum())

    @property
    def kl(self) -> float:
        assert self.kl_sums is not None, "evaluated without a reference"
        return float(self.kl_sums.sum())

    @property
    def agree(self) -> int:
        assert self.agree_counts is not None, "evaluated without a reference"
        return int(self.agree_counts.sum())

    # Per-window values: the units of the intervals and of paired comparisons.
    @property
    def window_nll(self) -> list[float]:
        """Mean NLL of each window, nats per token."""
        return (self.nll_sums / self.per_window).tolist()

    @property
    def window_kl(self) -> list[float]:
        assert self.kl_sums is not None, "evaluated without a reference"
        return (self.kl_sums / self.per_window).tolist()

    @property
    def window_top1(self) -> list[float]:
        assert self.agree_counts is not None, "evaluated without a reference"
        return (self.agree_counts.double() / self.per_window).tolist()

    def perplexity(self) -> float:
        return math.exp(self.nll / self.count)

    def kl_divergence(self) -> float:
        return self.kl / self.count

    def top1_agreement(self) -> float:
        return self.agree / self.count

    def perplexity_ci(self) -> intervals.Interval:
        """Perplexity with the 95 % interval of exp(mean NLL) over windows."""
        return intervals.mean_interval(self.window_nll).map(math.exp)

    def perplexity_interval(self) -> tuple[float, float]:
        iv = self.perplexity_ci()
        return iv.low, iv.high

    def kl_ci(self) -> intervals.Interval:
        return intervals.mean_interval(self.window_kl, lower=0.0)

    def top1_ci(self) -> intervals.Interval:
        return intervals.mean_interval(self.window_top1, lower=0.0, upper=1.0)


def compare(a: Totals, b: Totals, metric: str) -> intervals.Difference:
    """Paired comparison of ``a − b`` on the same windows. ``metric``: ``kl`` (nats per
    token), ``top1`` (share) or ``nll`` (nats per token: exp of it is the perplexity ratio)."""
    if (a.windows, a.per_window) != (b.windows, b.per_window):
        raise ValueError("a paired comparison needs both evaluated on the same windows")
    series = {
        "kl": lambda t: t.window_kl,
        "top1": lambda t: t.window_top1,
        "nll": lambda t: t.window_nll,
    }
    if metric not in series:
        raise ValueError(f"metric must be one of {sorted(series)}, got {metric!r}")
    return intervals.paired_difference(series[metric](a), series[metric](b))


def evaluate(
    model: Any,
    w: torch.Tensor,
    *,
    reference: ReferenceLogits | None = None,
    batch_size: int = 8,
    device: str | torch.device = "cpu",
    keep_reference: bool = False,
    on_batch: Callable[[int, int], None] | None = None,
    budget_bytes: int | None = None,
) -> tuple[Totals, ReferenceLogits | None]:
    """Evaluate ``model`` on windows ``w``.

    With ``reference`` (what this function returned for the reference model with
    ``keep_reference``), KL(p_ref || p_model) and top-1 agreement are accumulated too.
    ``keep_reference`` returns the model's log-probabilities for later calls, kept in
    memory up to ``budget_bytes`` (``reference.CACHE_BYTES``) and recomputed beyond.
    ``on_batch(done, total)`` reports progress in windows.
    """
    from labs.lm import reference as refmod

    n = w.shape[0]
    starts = batch_starts(n, batch_size)
    if reference is not None and reference.starts != starts:
        raise ValueError("the reference was computed on other windows or batches")
    tot = Totals(n, w.shape[1] - 1, with_reference=reference is not None)
    kept = (
        refmod.ReferenceLogits(model, w, batch_size, device, budget_bytes)
        if keep_reference
        else None
    )
    for group in refmod.chunks(len(starts), refmod.batch_bytes(model, w, batch_size)):
        refs = reference.logp(group) if reference is not None else [None] * len(group)

        def work(k: int, group: list[int] = group, refs: list[Any] = refs) -> tuple[int, Any]:
            first = starts[group[k]]
            batch = w[first : first + batch_size]
            with marked_batch(first):
                lp = logprobs(model, batch, device)
            tot.add(first, lp, batch[:, 1:].to(lp.device), refs[k])
            return group[k], lp if kept is not None and kept.wants(group[k]) else None

        for bi, lp in run_batches(work, range(len(group)), device):
            if lp is not None and kept is not None:
                kept.keep(bi, lp)
        if on_batch is not None:
            on_batch(min(n, starts[group[-1]] + batch_size), n)
    return tot.finish(), kept


def perplexity(model: Any, w: torch.Tensor, batch_size: int = 8, device: str = "cpu") -> float:
    """exp(mean NLL) of ``model`` over the predicted tokens of windows ``w``."""
    tot, _ = evaluate(model, w, batch_size=batch_size, device=device)
    return tot.perplexity()
