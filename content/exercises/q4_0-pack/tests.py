"""Cases for q4_0-pack: codes and scales from labs.quant's q4_0, whose to_bytes() (GGUF's
block layout, bit-exact with llama.cpp) is the expected result."""

from __future__ import annotations

import torch

from labs.judge.compare import bytes_check, q4_0_fields
from labs.judge.exercise_inputs import normal
from labs.judge.kit import Case
from labs.quant import quantize


def _mistaken(codes, d, *, neighbours=False, swapped=False, scale_last=False, fp32=False) -> bytes:
    blocks = codes.reshape(-1, 32)
    if neighbours:
        qs = blocks[:, 0::2] | (blocks[:, 1::2] << 4)
    elif swapped:
        qs = (blocks[:, :16] << 4) | blocks[:, 16:]
    else:
        qs = blocks[:, :16] | (blocks[:, 16:] << 4)
    scale = d.float() if fp32 else d
    d_bytes = scale.contiguous().view(torch.uint8).reshape(len(d), -1)
    parts = [qs, d_bytes] if scale_last else [d_bytes, qs]
    return torch.cat(parts, dim=1).numpy().tobytes()


MISTAKES = {
    "nibble order: byte j holds elements j (low) and j + 16 (high), not the neighbours 2j and 2j + 1": {
        "neighbours": True
    },
    "nibble order: element j goes in the low nibble and element j + 16 in the high one, "
    "not the reverse": {"swapped": True},
    "the scale is stored after the codes; a Q4_0 block starts with its fp16 d": {
        "scale_last": True
    },
    "the scale was stored as float32 (4 bytes); Q4_0 stores d as fp16 (2 bytes)": {"fp32": True},
}


def _case(name: str, x: torch.Tensor, example: bool = False) -> Case:
    q = quantize(x, "q4_0")
    codes, d = q.codes.reshape(-1).clone(), q.fields["scale_fp16"].clone()
    mistakes = {cause: (lambda kw=kw: _mistaken(codes, d, **kw)) for cause, kw in MISTAKES.items()}
    check = bytes_check(block_bytes=18, block_values=32, describe=q4_0_fields, mistakes=mistakes)
    return Case(name, (codes, d), q.to_bytes, check, example=example)


def cases() -> list[Case]:
    return [
        _case("a ramp from -1 to 1 (one block)", torch.linspace(-1, 1, 32), example=True),
        _case("two blocks of normal values", normal(21, 64), example=True),
        _case("4096 normal values", normal(22, 4096)),
        _case("outliers: a few values 50× the rest", normal(23, 1024, outliers=50.0)),
        _case(
            "an all-zero block between normal ones",
            torch.cat([normal(24, 32), torch.zeros(32), normal(25, 32)]),
        ),
    ]
