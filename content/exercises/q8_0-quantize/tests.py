"""Cases for q8_0-quantize: graded against labs.quant's q8_0 (bit-exact with llama.cpp)."""

from __future__ import annotations

import torch

from labs.judge.compare import bytes_check, q8_0_fields
from labs.judge.exercise_inputs import normal, ties_block
from labs.judge.kit import Case
from labs.quant import quantize

BLOCK_BYTES = 2 + 32


def _reference(x: torch.Tensor) -> bytes:
    return quantize(x, "q8_0").to_bytes()


def _mistaken(
    x: torch.Tensor, *, half_even=False, fp16_first=False, divide=False, scale_last=False
) -> bytes:
    """Q8_0 as a learner might write it, with one mistake."""
    blocks = x.reshape(-1, 32)
    d = blocks.abs().amax(dim=1) / 127
    if fp16_first:
        d = d.half().float()
    inverse = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
    scaled = (
        torch.where(d[:, None] == 0, 0.0, blocks / d[:, None])
        if divide
        else blocks * inverse[:, None]
    )
    if half_even:
        codes = scaled.round()
    else:
        whole = scaled.trunc()
        codes = whole + torch.where((scaled - whole).abs() >= 0.5, scaled.sign(), 0.0)
    d16 = d.half().view(torch.uint8).reshape(-1, 2)
    q = codes.to(torch.int8).view(torch.uint8)
    parts = [q, d16] if scale_last else [d16, q]
    return torch.cat(parts, dim=1).numpy().tobytes()


MISTAKES = {
    "rounding half to even (torch.round); llama.cpp's roundf rounds halves away from zero (2.5 → 3)": {
        "half_even": True
    },
    "the scale was rounded to fp16 before the codes were computed; llama.cpp computes the codes "
    "with the float32 d and rounds d to fp16 only to store it": {"fp16_first": True},
    "dividing by d; llama.cpp multiplies by id = 1/d, and x/d and x·(1/d) can round differently": {
        "divide": True
    },
    "the scale is stored after the codes; a Q8_0 block is the fp16 d first, then the 32 codes": {
        "scale_last": True
    },
}


def _case(name: str, x: torch.Tensor, example: bool = False) -> Case:
    mistakes = {cause: (lambda kw=kw: _mistaken(x, **kw)) for cause, kw in MISTAKES.items()}
    check = bytes_check(
        block_bytes=BLOCK_BYTES, block_values=32, describe=q8_0_fields, mistakes=mistakes
    )
    return Case(name, (x,), lambda: _reference(x), check, example=example)


def cases() -> list[Case]:
    zero_then_normal = torch.cat([torch.zeros(32), normal(2, 32)])
    return [
        _case("a ramp from -1 to 1 (one block)", torch.linspace(-1, 1, 32), example=True),
        _case("two blocks of normal values", normal(1, 64), example=True),
        _case("an all-zero block, then a normal one", zero_then_normal, example=True),
        _case("exact ties x·id = k + 0.5", ties_block(63.5)),
        _case("4096 normal values", normal(3, 4096)),
        _case("outliers: a few values 50× the rest", normal(4, 1024, outliers=50.0)),
        _case("tiny values: an fp16-subnormal scale", normal(5, 256, std=1e-6)),
        _case("large values", normal(6, 512, std=3e4)),
    ]
