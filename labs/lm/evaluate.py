"""The evaluation contract of DESIGN.md, "The shipped language model".

Encode ``heldout.txt`` with ``tokenizer.json`` and no special tokens, take the
first ``eval_tokens`` ids, cut them into consecutive non-overlapping windows of
``context`` ids (a last partial window is dropped); in each window tokens 2..n
are predicted from those before them. Perplexity is exp(mean NLL over every
predicted token), ``kl_divergence`` the mean over predicted positions of
KL(p_reference || p_quantized) in nats, ``top1_agreement`` the share of
positions whose argmax agrees. Logits are taken in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


def windows(ids: list[int] | torch.Tensor, context: int) -> torch.Tensor:
    """``[n_windows, context]`` int64: consecutive non-overlapping windows, partial tail dropped."""
    t = torch.as_tensor(ids, dtype=torch.long).flatten()
    n = t.numel() // context
    if n == 0:
        raise ValueError(f"{t.numel()} tokens make no full window of {context}")
    return t[: n * context].view(n, context)


@torch.no_grad()
def window_logits(
    model: Any, batch: torch.Tensor, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """float32 logits ``[b, context-1, vocab]`` predicting tokens 2..n of each window."""
    out = model(input_ids=batch.to(device), use_cache=False)
    return out.logits[:, :-1, :].float()


@dataclass
class Totals:
    """Running sums over predicted positions (float64 so long runs stay exact enough)."""

    nll: float = 0.0
    kl: float = 0.0
    agree: int = 0
    count: int = 0
    kl_by_position: torch.Tensor | None = None  # [context-1] sum of KL at each position
    windows: int = 0
    window_nll: list[float] = field(default_factory=list)  # mean NLL of each window, nats

    def perplexity(self) -> float:
        return math.exp(self.nll / self.count)

    def perplexity_interval(self) -> tuple[float, float]:
        """95 % interval of the perplexity from the spread of per-window mean NLL
        (windows are the independent units; tokens inside one are correlated)."""
        n = len(self.window_nll)
        mean = self.nll / self.count
        if n < 2:
            return math.exp(mean), math.exp(mean)
        var = sum((x - mean) ** 2 for x in self.window_nll) / (n - 1)
        half = 1.96 * math.sqrt(var / n)
        return math.exp(mean - half), math.exp(mean + half)

    def kl_divergence(self) -> float:
        return self.kl / self.count

    def top1_agreement(self) -> float:
        return self.agree / self.count


def iter_batches(w: torch.Tensor, batch_size: int) -> Iterator[torch.Tensor]:
    for i in range(0, w.shape[0], batch_size):
        yield w[i : i + batch_size]


@dataclass
class Reference:
    """The reference model's next-token distribution on one batch: log-probabilities and
    probabilities, float32 ``[b, context-1, vocab]`` (kept so KL costs one log-softmax)."""

    logp: torch.Tensor
    p: torch.Tensor


def evaluate(
    model: Any,
    w: torch.Tensor,
    *,
    reference: list[Reference] | None = None,
    batch_size: int = 8,
    device: str | torch.device = "cpu",
    keep_reference: bool = False,
    on_batch: Callable[[int, int], None] | None = None,
) -> tuple[Totals, list[Reference]]:
    """Evaluate ``model`` on windows ``w``.

    With ``reference`` (what this function returned for the reference model with
    ``keep_reference``), KL(p_ref || p_model) and top-1 agreement are accumulated too.
    ``on_batch(done, total)`` reports progress in windows.
    """
    tot = Totals()
    kept: list[Reference] = []
    for bi, batch in enumerate(iter_batches(w, batch_size)):
        logp = F.log_softmax(window_logits(model, batch, device), dim=-1).cpu()
        targets = batch[:, 1:]
        per_token = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).double()
        tot.window_nll.extend(per_token.mean(1).tolist())
        tot.nll += float(per_token.sum())
        tot.count += targets.numel()
        tot.windows += batch.shape[0]
        if reference is not None:
            ref = reference[bi]
            kl = (ref.p * (ref.logp - logp)).sum(-1).double()  # [b, t] nats
            tot.kl += float(kl.sum())
            pos = kl.sum(0)
            tot.kl_by_position = pos if tot.kl_by_position is None else tot.kl_by_position + pos
            tot.agree += int((ref.logp.argmax(-1) == logp.argmax(-1)).sum())
        if keep_reference:
            kept.append(Reference(logp, logp.exp()))
        if on_batch is not None:
            on_batch(tot.windows, w.shape[0])
    return tot, kept


def perplexity(model: Any, w: torch.Tensor, batch_size: int = 8, device: str = "cpu") -> float:
    """exp(mean NLL) of ``model`` over the predicted tokens of windows ``w``."""
    tot, _ = evaluate(model, w, batch_size=batch_size, device=device)
    return tot.perplexity()
