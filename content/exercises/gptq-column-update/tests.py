"""Cases for gptq-column-update: graded on a small layer's output error against lowbit's
GPTQ (labs.quant.gptq with int4, one scale per row)."""

from __future__ import annotations

import torch

from labs.judge.compare import type_name
from labs.judge.exercise_inputs import generator
from labs.judge.kit import Case, Verdict
from labs.quant import quantize
from labs.quant.gptq import gptq, hessian

FORMAT, OPTIONS = "int4", {"granularity": "channel"}
DAMP = 0.01  # labs.quant.gptq's default: 1% of the mean diagonal
SLACK = 1.02  # the learner's output error may be 2% above the reference's


def _layer(seed: int, out: int, inp: int, tokens: int = 512):
    """A weight and correlated calibration inputs (a random mixing of fewer factors)."""
    g = generator(seed)
    w = torch.randn(out, inp, generator=g) * 0.02
    mixing = torch.randn(inp // 4, inp, generator=g)
    x = torch.randn(tokens, inp // 4, generator=g) @ mixing + 0.1 * torch.randn(
        tokens, inp, generator=g
    )
    return w, x


def _hinv(x: torch.Tensor) -> torch.Tensor:
    """The upper Cholesky factor of the damped H^-1, as labs.quant.gptq computes it."""
    h = hessian(x)
    h += DAMP * torch.mean(torch.diag(h)) * torch.eye(h.shape[0])
    return torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)


def _mistaken(w, hinv, scale, *, rtn=False, no_divide=False, next_only=False):
    W, Q = w.clone(), torch.zeros_like(w)
    for i in range(W.shape[1]):
        q = torch.round(W[:, i] / scale).clamp(-7, 7) * scale
        Q[:, i] = q
        if rtn:
            continue
        err = (W[:, i] - q) / (1.0 if no_divide else hinv[i, i])
        stop = i + 2 if next_only else W.shape[1]
        W[:, i:stop] -= torch.outer(err, hinv[i, i:stop])
    return Q


MISTAKES = {
    "no error feedback: this is round-to-nearest; after quantizing column i, subtract "
    "err · hinv[i, i:] from the remaining columns": {"rtn": True},
    "the error was not divided by hinv[i, i]": {"no_divide": True},
    "only the next column was updated; the error is spread over every column not yet quantized": {
        "next_only": True
    },
}


def _mse(x, w, q) -> float:
    return float((x @ w.T - x @ q.T).pow(2).mean())


def _check(w, x, scale, mistakes):
    def check(expected: torch.Tensor, got) -> Verdict:
        if not isinstance(got, torch.Tensor) or got.shape != w.shape or got.dtype != torch.float32:
            what = (
                f"{type_name(got)} {tuple(got.shape)} {got.dtype}"
                if isinstance(got, torch.Tensor)
                else type_name(got)
            )
            return Verdict(
                False, f"expected a float32 tensor of shape {tuple(w.shape)}, got a {what}"
            )
        codes = got / scale[:, None]
        off = (
            ((codes - codes.round()).abs() > 1e-3)
            | (codes.abs() > 7 + 1e-3)
            | ~torch.isfinite(codes)
        )
        if bool(off.any()):
            r, c = (int(v) for v in off.nonzero()[0])
            return Verdict(
                False,
                f"not on the int4 grid: element ({r}, {c}) = {float(got[r, c]):.6g} is "
                f"{float(codes[r, c]):.4g} steps of its row's scale {float(scale[r]):.6g}; "
                "each element must be k · scale with k an integer in [-7, 7]",
            )
        rtn = quantize(w, FORMAT, **OPTIONS).dequantize()
        mine, ref, plain = _mse(x, w, got), _mse(x, w, expected), _mse(x, w, rtn)
        detail = {"output_mse": mine, "reference_mse": ref, "round_to_nearest_mse": plain}
        text = f"output MSE {mine:.4g}: lowbit's GPTQ {ref:.4g}, round-to-nearest {plain:.4g}"
        if mine <= ref * SLACK:
            return Verdict(True, text, detail)
        cause = next(
            (c for c, m in mistakes.items() if torch.allclose(m(), got, rtol=1e-4, atol=1e-6)), None
        )
        detail["likely_cause"] = cause
        message = f"{text}; more than 2% above the reference"
        return Verdict(False, message + (f"\nLikely cause: {cause}." if cause else ""), detail)

    return check


def _case(name: str, seed: int, out: int, inp: int, example: bool = False) -> Case:
    w, x = _layer(seed, out, inp)
    hinv = _hinv(x)
    scale = quantize(w, FORMAT, **OPTIONS).scales
    mistakes = {
        cause: (lambda kw=kw: _mistaken(w, hinv, scale, **kw)) for cause, kw in MISTAKES.items()
    }
    reference = lambda: gptq(w, hessian(x), FORMAT, OPTIONS, damp=DAMP).weight  # noqa: E731
    return Case(name, (w, hinv, scale), reference, _check(w, x, scale, mistakes), example=example)


def cases() -> list[Case]:
    return [
        _case("a layer of 16 × 64", 90, 16, 64, example=True),
        _case("a layer of 32 × 128", 91, 32, 128),
        _case("a layer of 64 × 256 (two GPTQ blocks)", 92, 64, 256),
    ]
