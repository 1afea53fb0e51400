"""Windows of token ids and the batches they are scored in: the plumbing that both
``labs.lm.evaluate`` and ``labs.lm.reference`` (the reference model's kept or recomputed
log-probabilities) run on."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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


def logprobs(model: Any, batch: torch.Tensor, device: str | torch.device = "cpu") -> torch.Tensor:
    """float32 log-probabilities ``[b, context-1, vocab]`` of tokens 2..n of each window."""
    return F.log_softmax(window_logits(model, batch, device), dim=-1)


_BATCH = threading.local()


@contextmanager
def marked_batch(first: int) -> Iterator[None]:
    """While open, this thread runs the batch whose first window is ``first``, so a
    forward hook (``labs.lm.calibrate``) can tell which tokens it sees, whichever core
    ``run_batches`` gave the batch."""
    _BATCH.first = first
    try:
        yield
    finally:
        _BATCH.first = None


def current_batch() -> int:
    """The first window of the batch this thread runs (``marked_batch``)."""
    first = getattr(_BATCH, "first", None)
    if first is None:
        raise RuntimeError("a forward pass ran outside a marked batch")
    return first


def batch_starts(n: int, batch_size: int) -> list[int]:
    return list(range(0, n, batch_size))


def run_batches(fn: Callable[[int], Any], items: Sequence[int], device: str | torch.device) -> list:
    """``[fn(i) for i in items]``; on the CPU spread over the cores the run was given
    (``labs.quant.parallel``: each batch on one thread, so results do not depend on it)."""
    if str(device).startswith("cpu"):
        from labs.quant.parallel import map_chunks

        return map_chunks(fn, list(items))
    return [fn(i) for i in items]
