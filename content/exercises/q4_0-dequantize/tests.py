"""Cases for q4_0-dequantize: bytes from labs.quant's q4_0 (bit-exact with llama.cpp), whose
dequantize() is the expected result."""

from __future__ import annotations

import torch

from labs.judge.compare import tensor_check
from labs.judge.exercise_inputs import normal
from labs.judge.kit import Case
from labs.quant import quantize

BLOCK_BYTES = 2 + 16


def _mistaken(
    data: bytes, n: int, *, interleaved=False, swapped=False, signed=False, no_offset=False
) -> torch.Tensor:
    """Q4_0 read back as a learner might, with one mistake."""
    rows = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(-1, BLOCK_BYTES)
    d = rows[:, :2].contiguous().view(torch.float16).float()
    low, high = (rows[:, 2:] & 0x0F).long(), (rows[:, 2:] >> 4).long()
    if swapped:
        low, high = high, low
    codes = (
        torch.stack([low, high], 2).reshape(-1, 32) if interleaved else torch.cat([low, high], 1)
    )
    if signed:
        values = torch.where(codes >= 8, codes - 16, codes).float()
    else:
        values = codes.float() - (0 if no_offset else 8)
    return (values * d).reshape(-1)[:n]


MISTAKES = {
    "nibble order: byte j holds elements j (low) and j + 16 (high), not two neighbours 2j, 2j + 1": {
        "interleaved": True
    },
    "nibble order: the low nibble is element j and the high nibble element j + 16, not the reverse": {
        "swapped": True
    },
    "the codes were read as signed 4-bit numbers; Q4_0 codes are unsigned 0..15 with an "
    "offset of 8": {"signed": True},
    "the offset of 8 was not subtracted: the value is (q - 8) * d": {"no_offset": True},
}


def _case(name: str, x: torch.Tensor, example: bool = False) -> Case:
    q = quantize(x, "q4_0")
    data, n = q.to_bytes(), x.numel()
    mistakes = {cause: (lambda kw=kw: _mistaken(data, n, **kw)) for cause, kw in MISTAKES.items()}
    return Case(name, (data, n), q.dequantize, tensor_check(mistakes=mistakes), example=example)


def cases() -> list[Case]:
    return [
        _case("a ramp from -1 to 1 (one block)", torch.linspace(-1, 1, 32), example=True),
        _case("two blocks of normal values", normal(11, 64), example=True),
        _case(
            "an all-zero block, then a normal one",
            torch.cat([torch.zeros(32), normal(12, 32)]),
            example=True,
        ),
        _case("1000 values: the last block partly used", normal(13, 1000)),
        _case("4096 normal values", normal(14, 4096)),
        _case("outliers: a few values 50× the rest", normal(15, 1024, outliers=50.0)),
        _case("tiny values: an fp16-subnormal scale", normal(16, 256, std=1e-6)),
        _case("large values", normal(17, 512, std=3e4)),
    ]
