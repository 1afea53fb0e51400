"""Cases for triton-block-absmax: graded against labs.quant.blockops.block_absmax."""

from __future__ import annotations

import torch

from labs.judge.compare import tensor_check
from labs.judge.exercise_inputs import normal
from labs.judge.kit import Case
from labs.quant.blockops import block_absmax


def _mistaken(x: torch.Tensor, block: int, *, signed=False, last_missing=False):
    blocks = x.reshape(-1, block)
    out = blocks.amax(dim=1) if signed else blocks.abs().amax(dim=1)
    if last_missing:
        out = out.clone()
        out[-1] = 0.0
    return out


MISTAKES = {
    "the largest signed value, not the largest magnitude: take tl.abs before tl.max": {
        "signed": True
    },
    "the last block was not computed: launch one program per block, len(x) // block of them": {
        "last_missing": True
    },
}


def _case(name: str, x: torch.Tensor, block: int, example: bool = False) -> Case:
    mistakes = {cause: (lambda kw=kw: _mistaken(x, block, **kw)) for cause, kw in MISTAKES.items()}
    reference = lambda: block_absmax(x.reshape(-1, block))  # noqa: E731
    return Case(name, (x, block), reference, tensor_check(mistakes=mistakes), example=example)


def cases() -> list[Case]:
    negative = -normal(110, 128).abs()
    return [
        _case("blocks of 32, normal values", normal(111, 128), 32, example=True),
        _case("blocks of 32, negative values only", negative, 32, example=True),
        _case("blocks of 16", normal(112, 256), 16),
        _case("blocks of 64, with a zero block", torch.cat([normal(113, 64), torch.zeros(64)]), 64),
        _case("blocks of 256, outliers", normal(114, 1024, outliers=50.0), 256),
    ]
