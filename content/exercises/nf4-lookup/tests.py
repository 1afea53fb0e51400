"""Cases for nf4-lookup: graded against labs.quant's nf4 codes (bit-exact with
bitsandbytes' quantize_4bit)."""

from __future__ import annotations

import torch

from labs.judge.compare import tensor_check
from labs.judge.exercise_inputs import normal
from labs.judge.kit import Case
from labs.quant import quantize
from labs.quant.constants import NF4_TABLE


def _reference(x: torch.Tensor) -> torch.Tensor:
    return quantize(x, "nf4").codes


def _mistaken(x, *, upper=False, per_tensor=False, block=64, divide=False):
    table = torch.tensor(NF4_TABLE, dtype=torch.float32)
    mids = (table[:-1] + table[1:]) / 2
    blocks = x.reshape(-1, block)
    absmax = blocks.abs().amax() if per_tensor else blocks.abs().amax(dim=1, keepdim=True)
    absmax = absmax.clamp(min=1e-38)
    y = (blocks / absmax if divide else blocks * (1 / absmax)).clamp(-1, 1)
    return torch.bucketize(y, mids, right=upper).reshape(x.shape).to(torch.uint8)


MISTAKES = {
    "a value exactly on a midpoint took the upper code; NF4 gives it the lower one (count the "
    "midpoints strictly below y)": {"upper": True},
    "one absmax for the whole tensor; NF4 has one per block of 64": {"per_tensor": True},
    "blocks of 32; NF4's blocks (bitsandbytes' default blocksize) hold 64 values": {"block": 32},
    "dividing by absmax; bitsandbytes multiplies by 1 / absmax, and the two can round "
    "differently": {"divide": True},
}


def _case(name: str, x: torch.Tensor, example: bool = False) -> Case:
    mistakes = {cause: (lambda kw=kw: _mistaken(x, **kw)) for cause, kw in MISTAKES.items()}
    return Case(name, (x,), lambda: _reference(x), tensor_check(mistakes=mistakes), example=example)


def _on_midpoints() -> torch.Tensor:
    """A block with absmax 1 (so y = x exactly) holding all 15 midpoints, twice, and ±1."""
    table = torch.tensor(NF4_TABLE, dtype=torch.float32)
    mids = (table[:-1] + table[1:]) / 2
    block = torch.cat([torch.tensor([1.0, -1.0]), mids, mids, torch.zeros(64 - 32)])
    return torch.cat([block, normal(80, 64)])


def cases() -> list[Case]:
    return [
        _case("two blocks of normal values", normal(81, 128), example=True),
        _case("a block with values on midpoints", _on_midpoints()[:64].clone(), example=True),
        _case("every midpoint, twice, then a normal block", _on_midpoints()),
        _case(
            "an all-zero block between normal ones",
            torch.cat([normal(82, 64), torch.zeros(64), normal(83, 64)]),
        ),
        _case("outliers: a few values 50× the rest", normal(84, 1024, outliers=50.0)),
        _case("4096 normal values", normal(85, 4096)),
    ]
