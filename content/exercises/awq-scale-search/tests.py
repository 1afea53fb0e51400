"""Cases for awq-scale-search: graded on a layer's output error with the learner's scales
against lowbit's AWQ search (labs.quant.awq, int4 groups of 128, no clipping)."""

from __future__ import annotations

import torch

from labs.judge.compare import type_name
from labs.judge.exercise_inputs import generator
from labs.judge.kit import Case, Verdict
from labs.quant.awq import awq, fake_quantize_scaled

FORMAT, OPTIONS = "int4", {}  # int4: symmetric, one fp32 scale per group of 128
SLACK = 1.01


def _layer(seed: int, out: int, inp: int, tokens: int = 256, salient: int = 4):
    g = generator(seed)
    w = torch.randn(out, inp, generator=g) * 0.02
    x = torch.randn(tokens, inp, generator=g)
    x[:, torch.randperm(inp, generator=g)[:salient]] *= 20.0  # a few salient channels
    return w, x


def _mse(w, x, s) -> float:
    w_hat = fake_quantize_scaled(w, s, FORMAT, OPTIONS)[0]
    return float((x @ w.T - x @ w_hat.T).pow(2).mean())


def _mistaken(x, *, ones=False, inverse=False, use_max=False):
    if ones:
        return torch.ones(x.shape[1])
    stat = x.abs().amax(dim=0) if use_max else x.abs().mean(dim=0)
    s = stat.pow(-0.5 if inverse else 0.5).clamp(min=1e-4)
    return s / (s.max() * s.min()).sqrt()


MISTAKES = {
    "s = 1 everywhere: that is round-to-nearest; scale the salient input channels up": {
        "ones": True
    },
    "the salient channels were scaled down (mean|x|^-alpha); AWQ multiplies their weights by "
    "mean|x|^alpha so they get finer steps": {"inverse": True},
}


def _check(w, x, mistakes):
    def check(expected: torch.Tensor, got) -> Verdict:
        if not isinstance(got, torch.Tensor) or got.shape != (w.shape[1],):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type_name(got)
            return Verdict(
                False,
                f"expected a tensor of {w.shape[1]} scales, one per input channel, got {shape}",
            )
        s = got.float()
        if not bool(torch.isfinite(s).all()) or bool((s <= 0).any()):
            return Verdict(False, "every scale must be finite and positive")
        mine, ref, plain = _mse(w, x, s), _mse(w, x, expected), _mse(w, x, torch.ones_like(s))
        detail = {"output_mse": mine, "reference_mse": ref, "round_to_nearest_mse": plain}
        text = f"output MSE {mine:.4g}: lowbit's AWQ {ref:.4g}, round-to-nearest {plain:.4g}"
        if mine <= ref * SLACK:
            return Verdict(True, text, detail)
        cause = next((c for c, m in mistakes.items() if torch.allclose(m(), s, rtol=1e-4)), None)
        if cause is None and mine >= plain * 0.999:
            cause = "no gain over round-to-nearest: check the scales multiply the weights' input columns"
        detail["likely_cause"] = cause
        message = f"{text}; more than 1% above the reference"
        return Verdict(False, message + (f"\nLikely cause: {cause}." if cause else ""), detail)

    return check


def _case(name: str, seed: int, out: int, inp: int, example: bool = False) -> Case:
    w, x = _layer(seed, out, inp)
    mistakes = {cause: (lambda kw=kw: _mistaken(x, **kw)) for cause, kw in MISTAKES.items()}
    reference = lambda: awq([w], x, FORMAT, OPTIONS, n_grid=20, clip=False).scales  # noqa: E731
    return Case(name, (w, x), reference, _check(w, x, mistakes), example=example)


def cases() -> list[Case]:
    return [
        _case("a layer of 32 × 128", 100, 32, 128, example=True),
        _case("a layer of 64 × 256", 101, 64, 256),
        _case("a layer of 48 × 384, three groups", 102, 48, 384),
    ]
