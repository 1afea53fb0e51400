"""Cases for triton-dequant-matmul: graded against labs.quant.matmul.quantized_matmul of the
Q8_0 weight (block scales applied inside the reduction, sums in float64)."""

from __future__ import annotations

import torch

from labs.judge.compare import tensor_check
from labs.judge.exercise_inputs import generator
from labs.judge.kit import Case
from labs.quant import quantize
from labs.quant.matmul import quantized_matmul

RTOL = 1e-4  # of the output's largest |value|


def _mistaken(a, codes, scales, *, no_scale=False, first_scale=False, row_mean=False):
    c = codes.double()
    if no_scale:
        return (a.double() @ c.T).float()
    if first_scale:  # one scale per row, the first block's, applied after the whole sum
        return ((a.double() @ c.T) * scales[:, 0].double()[None, :]).float()
    if row_mean:
        return ((a.double() @ c.T) * scales.double().mean(dim=1)[None, :]).float()
    raise AssertionError


MISTAKES = {
    "the scales were never applied: W = codes · scale of its block": {"no_scale": True},
    "one scale per row applied after the whole sum; each block of 32 along K has its own "
    "scale, applied to its partial sum inside the loop": {"first_scale": True},
    "the mean of a row's scales applied after the sum; the block scales must multiply each "
    "block's partial sum": {"row_mean": True},
}


def _case(name: str, seed: int, m: int, n: int, k: int, example: bool = False) -> Case:
    g = generator(seed)
    a = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) * torch.logspace(-2, 0, k // 32).repeat_interleave(32)
    q = quantize(w, "q8_0")
    codes, scales = q.codes.clone(), q.scales.reshape(n, k // 32).clone()
    expected = quantized_matmul(a, q)
    atol = RTOL * float(expected.abs().max())
    mistakes = {
        cause: (lambda kw=kw: _mistaken(a, codes, scales, **kw)) for cause, kw in MISTAKES.items()
    }
    check = tensor_check(atol=atol, mistakes=mistakes)
    return Case(name, (a, codes, scales), lambda: quantized_matmul(a, q), check, example=example)


def cases() -> list[Case]:
    return [
        _case("16 × 64 times 64 × 16", 130, 16, 16, 64, example=True),
        _case("32 × 128 times 128 × 32", 131, 32, 32, 128),
        _case("64 × 256 times 256 × 128", 132, 64, 128, 256),
    ]
