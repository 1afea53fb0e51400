"""Cases for int8-asymmetric-channel: graded against labs.quant's int8 with
granularity="channel", zero_point=True."""

from __future__ import annotations

import torch

from labs.judge.compare import tensor_check, tuple_check
from labs.judge.exercise_inputs import generator
from labs.judge.kit import Case
from labs.quant import quantize


def _reference(w: torch.Tensor):
    q = quantize(w, "int8", granularity="channel", zero_point=True)
    return q.codes, q.scales, q.fields["zero_point"]


def _mistaken(w, *, no_clamp=False, no_zero=False, away=False):
    lo, hi = w.amin(dim=1), w.amax(dim=1)
    if not no_zero:
        lo, hi = lo.clamp(max=0), hi.clamp(min=0)
    scale = (hi / 255 - lo / 255).abs()
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale)

    def rnd(u):
        return (
            torch.where(u >= 0, torch.floor(u + 0.5), torch.ceil(u - 0.5))
            if away
            else torch.round(u)
        )

    zero_point = rnd(-lo / divisor).clamp(0, 255)
    codes = rnd(w / divisor[:, None]) + zero_point[:, None]
    codes = codes if no_clamp else codes.clamp(0, 255)
    return codes.to(torch.int32).to(torch.uint8), scale, zero_point.to(torch.uint8)


MISTAKES = {
    "no clamp before the cast: a code of 256 wraps around to 0 in uint8; clamp to [0, 255] first": {
        "no_clamp": True
    },
    "the range does not include 0: use lo = min(min(row), 0) and hi = max(max(row), 0)": {
        "no_zero": True
    },
    "rounding halves away from zero; torch.round (and lowbit's int8) rounds them to even": {
        "away": True
    },
}


def _case(name: str, w: torch.Tensor, example: bool = False) -> Case:
    mistakes = {cause: (lambda kw=kw: _mistaken(w, **kw)) for cause, kw in MISTAKES.items()}
    parts = [("codes", tensor_check()), ("scales", tensor_check()), ("zero points", tensor_check())]
    return Case(
        name, (w,), lambda: _reference(w), tuple_check(parts, mistakes=mistakes), example=example
    )


def _layer(seed: int, out: int, inp: int, shift: float = 0.0) -> torch.Tensor:
    return torch.randn(out, inp, generator=generator(seed)) * 0.02 + shift


def cases() -> list[Case]:
    mixed = _layer(42, 6, 64)
    mixed[1] = mixed[1].abs() + 0.01  # all positive
    mixed[4] = 0.0
    wrap = torch.tensor([[-127.5, -1.0, 0.0, 1.0, 127.5, 64.0, -64.0, 2.5]])
    return [
        _case("a small layer (4 × 16)", _layer(40, 4, 16), example=True),
        _case(
            "a skewed layer: every value shifted by +0.05",
            _layer(41, 4, 32, shift=0.05),
            example=True,
        ),
        _case("an all-positive row and a row of zeros", mixed),
        _case("a row spanning -127.5 … 127.5: the code 256", wrap),
        _case("a layer of 64 × 256", _layer(43, 64, 256)),
    ]
