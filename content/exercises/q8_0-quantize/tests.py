"""Cases for q8_0-quantize: graded against labs.quant's q8_0 (bit-exact with llama.cpp)."""

from __future__ import annotations

import torch

from labs.judge.exercise_inputs import normal, ties_block
from labs.judge.gguf_cases import q8_0_case
from labs.judge.kit import Case


def cases() -> list[Case]:
    zero_then_normal = torch.cat([torch.zeros(32), normal(2, 32)])
    return [
        q8_0_case("a ramp from -1 to 1 (one block)", torch.linspace(-1, 1, 32), example=True),
        q8_0_case("two blocks of normal values", normal(1, 64), example=True),
        q8_0_case("an all-zero block, then a normal one", zero_then_normal, example=True),
        q8_0_case("exact ties x·id = k + 0.5", ties_block(63.5)),
        q8_0_case("4096 normal values", normal(3, 4096)),
        q8_0_case("outliers: a few values 50× the rest", normal(4, 1024, outliers=50.0)),
        q8_0_case("tiny values: an fp16-subnormal scale", normal(5, 256, std=1e-6)),
        q8_0_case("large values", normal(6, 512, std=3e4)),
    ]
