"""The reference model's log-probabilities, in bounded memory.

KL divergence compares each changed model with the unchanged one position by
position, over a 4096-token vocabulary: 16 KiB per predicted token in float32, so
3.4 GiB for the 111,133 tokens of ``heldout.txt``. Instead the first windows' log-
probabilities are kept (up to ``CACHE_BYTES``, which holds every default run's
windows) and the rest are recomputed chunk by chunk (``CHUNK_BYTES`` at a time) when
a changed model is scored: the model is put back in its reference state for the
chunk (``reference_state``: every ``WeightEditor``'s original weights swapped in, KV
quantization suspended), then changed again. Recomputing the same batch of windows
with the same weights gives the same float32 values bit for bit, so KL is exact, not
approximated (llama.cpp's ``--kl-divergence-base`` file instead stores every
position's log-probabilities rounded to 16 bits).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

CACHE_BYTES = 128 * 2**20  # reference log-probabilities kept across scores
CHUNK_BYTES = 64 * 2**20  # recomputed at a time (also bounds the batches run at once)


@contextlib.contextmanager
def reference_state(model: Any) -> Iterator[None]:
    """The model as loaded for the duration: weights as trained, no KV quantization."""
    from labs.lm import fakequant, kvcache

    with fakequant.original_weights(model), kvcache.suspended():
        yield


def batch_bytes(model: Any, w: torch.Tensor, batch_size: int) -> int:
    """Bytes of one batch's float32 log-probabilities."""
    vocab = int(model.config.get_text_config().vocab_size)
    return min(batch_size, w.shape[0]) * (w.shape[1] - 1) * vocab * 4


def chunks(n_batches: int, one_batch: int) -> list[list[int]]:
    """Batch indices in groups of at most ``CHUNK_BYTES`` of log-probabilities (at least
    one batch): the unit of recomputation and of parallel work."""
    per = max(1, CHUNK_BYTES // max(1, one_batch))
    return [list(range(i, min(i + per, n_batches))) for i in range(0, n_batches, per)]


class ReferenceLogits:
    """Log-probabilities of the reference model on windows ``w``, by batch index."""

    def __init__(
        self,
        model: Any,
        w: torch.Tensor,
        batch_size: int,
        device: str | torch.device,
        budget_bytes: int | None = None,
    ) -> None:
        from labs.lm.batches import batch_starts

        self.model, self.w, self.batch_size, self.device = model, w, batch_size, device
        self.starts = batch_starts(w.shape[0], batch_size)
        budget = CACHE_BYTES if budget_bytes is None else budget_bytes
        self.cached_batches = budget // max(1, batch_bytes(model, w, batch_size))
        self.cache: dict[int, torch.Tensor] = {}
        self.recomputed = 0  # batches recomputed so far (what the bounded memory costs)

    def wants(self, bi: int) -> bool:
        """Whether batch ``bi`` is one of those kept (the first ones, within the budget)."""
        return bi < self.cached_batches

    def keep(self, bi: int, logp: torch.Tensor) -> None:
        if self.wants(bi):
            self.cache[bi] = logp

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.cache.values())

    def logp(self, group: list[int]) -> list[torch.Tensor]:
        """The log-probabilities of batches ``group``: kept, or recomputed with the model
        in its reference state (the caller's changes are back on return)."""
        from labs.lm.batches import logprobs, run_batches

        missing = [bi for bi in group if bi not in self.cache]
        got: dict[int, torch.Tensor] = {}
        if missing:

            def work(bi: int) -> tuple[int, torch.Tensor]:
                first = self.starts[bi]
                return bi, logprobs(
                    self.model, self.w[first : first + self.batch_size], self.device
                )

            with reference_state(self.model):
                got = dict(run_batches(work, missing, self.device))
            self.recomputed += len(missing)
        return [self.cache[bi] if bi in self.cache else got[bi] for bi in group]
