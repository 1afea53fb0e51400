"""Cases for int8-symmetric-channel: graded against labs.quant's int8, granularity="channel"."""

from __future__ import annotations

import torch

from labs.judge.compare import tensor_check, tuple_check
from labs.judge.exercise_inputs import generator
from labs.judge.kit import Case
from labs.quant import quantize


def _reference(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q = quantize(w, "int8", granularity="channel")
    return q.codes, q.scales


def _mistaken(w, *, away=False, per_tensor=False, per_column=False, qmax=127):
    if per_tensor:
        amax = w.abs().amax().expand(w.shape[0])
    elif per_column:
        amax = w.abs().amax(dim=0)[: w.shape[0]]
    else:
        amax = w.abs().amax(dim=1)
    scale = amax / qmax
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale)
    u = w / divisor[:, None]
    r = torch.where(u >= 0, torch.floor(u + 0.5), torch.ceil(u - 0.5)) if away else torch.round(u)
    return r.clamp(-127, 127).to(torch.int8), scale


MISTAKES = {
    "rounding halves away from zero; torch.round (and lowbit's int8) rounds them to even": {
        "away": True
    },
    "one scale for the whole tensor; per channel means one scale per row (output channel)": {
        "per_tensor": True
    },
    "scales per column (input channel); an output channel is a row of the (out, in) weight": {
        "per_column": True
    },
    "scale = amax / 128; the symmetric int8 grid is [-127, 127], so scale = amax / 127": {
        "qmax": 128
    },
}


def _case(name: str, w: torch.Tensor, example: bool = False) -> Case:
    mistakes = {cause: (lambda kw=kw: _mistaken(w, **kw)) for cause, kw in MISTAKES.items()}
    check = tuple_check([("codes", tensor_check()), ("scales", tensor_check())], mistakes=mistakes)
    return Case(name, (w,), lambda: _reference(w), check, example=example)


def _layer(seed: int, out: int, inp: int) -> torch.Tensor:
    return torch.randn(out, inp, generator=generator(seed)) * 0.02


def cases() -> list[Case]:
    outlier = _layer(32, 8, 64)
    outlier[3, 5] = 10.0
    zero_row = _layer(33, 4, 32)
    zero_row[2] = 0.0
    ties = torch.tensor([[127.0, 2.5, 3.5, -2.5, -3.5, 0.5, 1.5, -0.5]])  # scale 1: exact ties
    return [
        _case("a small layer (4 × 16)", _layer(30, 4, 16), example=True),
        _case("ties: codes 2.5 → 2, 3.5 → 4", ties, example=True),
        _case("a layer of 64 × 256", _layer(31, 64, 256)),
        _case("one outlier row", outlier),
        _case("a row of zeros", zero_row),
        _case("a wide layer (16 × 4096)", _layer(34, 16, 4096)),
    ]
