"""Cases for nvfp4-two-level-scale: graded against labs.quant's nvfp4 (bit-exact with
torchao's nvfp4_quantize, two-level)."""

from __future__ import annotations

import torch

from labs.judge.compare import number_check, tensor_check, tuple_check
from labs.judge.exercise_inputs import normal
from labs.judge.kit import Case
from labs.quant import quantize


def _reference(x: torch.Tensor):
    q = quantize(x, "nvfp4")
    return float(q.tensor_fields["tensor_scale_fp32"]), q.fields["scale_fp8"].view(
        torch.float8_e4m3fn
    )


def _mistaken(x, *, no_six=False, one_level=False, no_guard=False, block_448=False):
    amax = x.abs().max()
    tensor_scale = amax / 448 if no_six else amax / (448 * 6)
    divisor = tensor_scale if (no_guard or tensor_scale != 0) else torch.tensor(1.0)
    block_amax = x.reshape(-1, 16).abs().amax(dim=1)
    wanted = block_amax / (448 if block_448 else 6)
    block = wanted if one_level else wanted / divisor
    return float(tensor_scale), block.to(torch.float8_e4m3fn)


MISTAKES = {
    "tensor scale amax / 448; NVFP4's is amax / (448 · 6), so the largest block scale is 448": {
        "no_six": True
    },
    "the block scale was not divided by the tensor scale: E4M3 alone cannot hold amax_b / 6 for "
    "every tensor": {"one_level": True},
    "missing zero-block guard: an all-zero tensor has tensor scale 0; divide by 1 so the block "
    "scales are 0, not NaN": {"no_guard": True},
    "block scale from amax_b / 448; the block scale is amax_b / 6 (E2M1's largest value), "
    "divided by the tensor scale": {"block_448": True},
}


def _case(name: str, x: torch.Tensor, example: bool = False) -> Case:
    mistakes = {cause: (lambda kw=kw: _mistaken(x, **kw)) for cause, kw in MISTAKES.items()}
    parts = [("tensor scale", number_check()), ("block scales", tensor_check())]
    return Case(
        name, (x,), lambda: _reference(x), tuple_check(parts, mistakes=mistakes), example=example
    )


def cases() -> list[Case]:
    quiet = torch.cat([normal(70, 32) * 100, normal(71, 16) * 1e-4, normal(72, 16) * 1e-6])
    return [
        _case("four blocks of normal values", normal(73, 64), example=True),
        _case("outliers: a few values 50× the rest", normal(74, 256, outliers=50.0), example=True),
        _case("quiet blocks: E4M3 block scales that underflow", quiet),
        _case("an all-zero tensor", torch.zeros(32)),
        _case("large values", normal(75, 512, std=1e4)),
        _case("4096 normal values", normal(76, 4096)),
    ]
