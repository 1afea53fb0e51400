"""Cases for mx-e8m0-scale: graded against labs.quant's mxfp4 (scale_rounding floor and
rceil; bit-exact with torchao's to_mx)."""

from __future__ import annotations

import torch

from labs.judge.compare import tensor_check
from labs.judge.exercise_inputs import normal
from labs.judge.kit import Case
from labs.quant import quantize


def _reference(x: torch.Tensor, rule: str) -> torch.Tensor:
    return quantize(x, "mxfp4", scale_rounding=rule).fields["scale_e8m0"]


def _mistaken(x, rule, *, float_log2=False, no_guard=False, swap=False, no_emax=False):
    amax = x.reshape(-1, 32).abs().amax(dim=1)
    if swap:
        rule = "rceil" if rule == "floor" else "floor"
    if rule == "floor":
        if float_log2:
            e_floor = torch.floor(torch.log2(amax)).nan_to_num(0, 0, 0).to(torch.int32)
        else:
            e_floor = torch.frexp(amax)[1] - 1
        code = e_floor - (0 if no_emax else 2) + 127
    else:
        descale = amax / 6.0
        if float_log2:
            code = torch.ceil(torch.log2(descale)).nan_to_num(0, 0, 0).to(torch.int32) + 127
        else:
            m, e = torch.frexp(descale)
            code = torch.where(m == 0.5, e - 1, e) + 127
    if not no_guard:
        code = torch.where(amax == 0, torch.zeros_like(code), code)
    return code.clamp(0, 254).to(torch.uint8)


MISTAKES = {
    "floor(log2(amax)) taken with a float log2, which rounds 7.9999995 up to 3.0; read the "
    "exponent from the bits (torch.frexp)": {"float_log2": True},
    "missing zero-block guard: an all-zero block must get code 0 (the scale 2^-127)": {
        "no_guard": True
    },
    "the other rule: 'floor' is OCP's floor(log2(amax)) - emax, 'rceil' NVIDIA's amax / 6 "
    "rounded up to a power of two": {"swap": True},
    "emax_elem not subtracted: the scale is 2^(floor(log2(amax)) - 2) for E2M1": {"no_emax": True},
}


def _case(name: str, x: torch.Tensor, rule: str, example: bool = False) -> Case:
    mistakes = {cause: (lambda kw=kw: _mistaken(x, rule, **kw)) for cause, kw in MISTAKES.items()}
    return Case(
        name,
        (x, rule),
        lambda: _reference(x, rule),
        tensor_check(mistakes=mistakes),
        example=example,
    )


def _with_amax(amaxes: list[float], seed: int) -> torch.Tensor:
    """One block per amax: uniform values below it, the amax itself first."""
    g = torch.Generator().manual_seed(seed)
    blocks = [
        torch.cat([torch.tensor([a]), (torch.rand(31, generator=g) * 2 - 1) * a]) for a in amaxes
    ]
    return torch.cat(blocks).to(torch.float32)


def cases() -> list[Case]:
    below_8 = float(torch.nextafter(torch.tensor(8.0), torch.tensor(0.0)))  # 7.9999995
    edges = _with_amax([8.0, below_8, 6.0, 12.0, 0.75, 1.0], 60)
    wide = _with_amax([1e-20, 3e-12, 1e-5, 0.1, 7.0, 1e3, 5e9, 1e20], 61)
    zeros_between = torch.cat([normal(62, 32), torch.zeros(32), normal(63, 32)])
    return [
        _case("floor: four blocks of normal values", normal(64, 128), "floor", example=True),
        _case("rceil: four blocks of normal values", normal(64, 128), "rceil", example=True),
        _case("floor: a zero block between two others", zeros_between, "floor", example=True),
        _case("floor: amax 8, 7.9999995, 6, 12, 0.75, 1", edges, "floor"),
        _case("rceil: amax 8, 7.9999995, 6, 12, 0.75, 1", edges, "rceil"),
        _case("floor: amax from 1e-20 to 1e20", wide, "floor"),
        _case("rceil: amax from 1e-20 to 1e20", wide, "rceil"),
        _case("rceil: a zero block between two others", zeros_between, "rceil"),
    ]
