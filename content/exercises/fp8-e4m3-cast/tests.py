"""Cases for fp8-e4m3-cast: dynamic scales graded against labs.quant's fp8_e4m3/fp8_e5m2
(per tensor); static scales against the same rule (clamp, then torch's cast, which the
library's tests check code for code against its own encoder)."""

from __future__ import annotations

import torch

from labs.judge.compare import number_check, tensor_check, tuple_check
from labs.judge.exercise_inputs import normal
from labs.judge.kit import Case
from labs.quant import F8_E4M3_MAX, F8_E5M2_MAX, quantize

FP8 = {"e4m3": (torch.float8_e4m3fn, F8_E4M3_MAX), "e5m2": (torch.float8_e5m2, F8_E5M2_MAX)}


def _reference(x: torch.Tensor, fmt: str, scale: float | None):
    dtype, f8_max = FP8[fmt]
    if scale is None:
        q = quantize(x, f"fp8_{fmt}")
        return q.codes.view(dtype), float(q.tensor_fields["scale_fp32"])
    s = torch.tensor(scale, dtype=torch.float32)
    return (x / s).clamp(-f8_max, f8_max).to(dtype), float(s)


def _mistaken(x, fmt, scale, *, no_clamp=False, multiply=False, other_max=False):
    dtype, f8_max = FP8[fmt]
    other = FP8["e5m2" if fmt == "e4m3" else "e4m3"][1]
    amax = x.abs().max()
    s = (amax / (other if other_max else f8_max)) if scale is None else torch.tensor(scale)
    d = s if s != 0 else torch.tensor(1.0)
    u = x * d if multiply else x / d
    u = u if no_clamp else u.clamp(-f8_max, f8_max)
    return u.to(dtype), float(s)


MISTAKES = {
    "no clamp before the cast: values beyond F8_MAX · scale became inf; clamp x / scale to "
    "±F8_MAX first": {"no_clamp": True},
    "multiplying by the scale; the stored number is x / scale (the value is code × scale)": {
        "multiply": True
    },
    "the other format's maximum: E4M3's largest value is 448, E5M2's 57344": {"other_max": True},
}


def _case(name: str, x: torch.Tensor, fmt: str, scale: float | None, example: bool = False) -> Case:
    mistakes = {
        cause: (lambda kw=kw: _mistaken(x, fmt, scale, **kw)) for cause, kw in MISTAKES.items()
    }
    parts = [("codes", tensor_check()), ("scale", number_check())]
    check = tuple_check(parts, mistakes=mistakes)
    return Case(name, (x, fmt, scale), lambda: _reference(x, fmt, scale), check, example=example)


def cases() -> list[Case]:
    act = normal(51, 512, std=3.0)
    return [
        _case(
            "E4M3, dynamic scale, 256 normal values", normal(50, 256), "e4m3", None, example=True
        ),
        _case(
            "E4M3, dynamic scale, outliers",
            normal(52, 512, outliers=30.0),
            "e4m3",
            None,
            example=True,
        ),
        _case("E4M3, static scale 0.01: values beyond 4.48 clip", act, "e4m3", 0.01),
        _case("E5M2, dynamic scale", normal(53, 512, std=100.0), "e5m2", None),
        _case("E5M2, static scale 1e-4: values beyond 5.7344 clip", act, "e5m2", 1e-4),
        _case("E4M3, an all-zero tensor", torch.zeros(64), "e4m3", None),
        _case("E4M3, a 2-D tensor (16 × 64)", normal(54, 1024).reshape(16, 64), "e4m3", None),
    ]
