"""Q8_0 cases shared by the exercises that produce Q8_0 bytes (plain torch and Triton):
the reference is labs.quant's q8_0, bit-exact with llama.cpp's quantize_row_q8_0_ref."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labs.judge.compare import bytes_check, q8_0_fields
from labs.judge.kit import Case

if TYPE_CHECKING:
    import torch

Q8_0_BLOCK_BYTES = 2 + 32  # fp16 d, 32 int8 codes


def q8_0_mistaken(x: torch.Tensor, **mistake: bool) -> bytes:
    """Q8_0 as a learner might write it, with the named mistake (see ``Q8_0_MISTAKES``)."""
    import torch

    blocks = x.reshape(-1, 32)
    d = blocks.abs().amax(dim=1) / 127
    if mistake.get("fp16_first"):
        d = d.half().float()
    inverse = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
    if mistake.get("divide"):
        scaled = torch.where(d[:, None] == 0, 0.0, blocks / d[:, None])
    else:
        scaled = blocks * inverse[:, None]
    if mistake.get("half_even"):
        codes = scaled.round()
    else:
        whole = scaled.trunc()
        codes = whole + torch.where((scaled - whole).abs() >= 0.5, scaled.sign(), 0.0)
    d16 = d.half().view(torch.uint8).reshape(-1, 2)
    q = codes.to(torch.int8).view(torch.uint8)
    parts = [q, d16] if mistake.get("scale_last") else [d16, q]
    return torch.cat(parts, dim=1).numpy().tobytes()


Q8_0_MISTAKES: dict[str, dict[str, Any]] = {
    "rounding half to even (torch.round); llama.cpp's roundf rounds halves away from zero "
    "(2.5 → 3)": {"half_even": True},
    "the scale was rounded to fp16 before the codes were computed; llama.cpp computes the "
    "codes with the float32 d and rounds d to fp16 only to store it": {"fp16_first": True},
    "dividing by d; llama.cpp multiplies by id = 1/d, and x/d and x·(1/d) can round differently": {
        "divide": True
    },
    "the scale is stored after the codes; a Q8_0 block is the fp16 d first, then the 32 codes": {
        "scale_last": True
    },
}


def q8_0_case(name: str, x: torch.Tensor, example: bool = False) -> Case:
    """One call ``quantize(x)`` graded against labs.quant's Q8_0 bytes."""
    from labs.quant import quantize

    mistakes = {
        cause: (lambda kw=kw: q8_0_mistaken(x, **kw)) for cause, kw in Q8_0_MISTAKES.items()
    }
    check = bytes_check(
        block_bytes=Q8_0_BLOCK_BYTES, block_values=32, describe=q8_0_fields, mistakes=mistakes
    )
    return Case(name, (x,), lambda: quantize(x, "q8_0").to_bytes(), check, example=example)
