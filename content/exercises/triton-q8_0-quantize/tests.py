"""Cases for triton-q8_0-quantize: the q8_0-quantize cases (labs.quant's q8_0, bit-exact with
llama.cpp), for a Triton kernel."""

from __future__ import annotations

import torch

from labs.judge.exercise_inputs import normal, ties_block
from labs.judge.gguf_cases import q8_0_case
from labs.judge.kit import Case


def cases() -> list[Case]:
    return [
        q8_0_case("a ramp from -1 to 1 (one block)", torch.linspace(-1, 1, 32), example=True),
        q8_0_case(
            "an all-zero block, then a normal one",
            torch.cat([torch.zeros(32), normal(120, 32)]),
            example=True,
        ),
        q8_0_case("exact ties x·id = k + 0.5", ties_block(63.5)),
        q8_0_case("1024 normal values", normal(121, 1024)),
        q8_0_case(
            "0.49999997 · d must round to 0",
            torch.tensor([127.0, 0.49999997, -0.49999997] + [0.0] * 29),
        ),
        q8_0_case("tiny values: an fp16-subnormal scale", normal(122, 256, std=1e-6)),
        q8_0_case("large values and outliers", normal(123, 512, std=3e4, outliers=20.0)),
    ]
