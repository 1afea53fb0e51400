"""GPTQ and AWQ against the papers' algorithms on hand-checkable tiny cases.

gptqmodel 7.7 needs torch >= 2.14.1 and llmcompressor 0.14 needs transformers <= 5.17
(plus datasets, accelerate, auto-round), so neither installs beside the pinned torch
2.13.0 / transformers 5.23.0; the reference here is GPTQ's Algorithm 1 written out
column by column, without lazy batching, and AWQ's grid search written out directly.
"""

from __future__ import annotations

import torch

from labs.quant import quantize
from labs.quant.awq import awq
from labs.quant.gptq import element_table, gptq, hessian


def paper_gptq(w: torch.Tensor, h: torch.Tensor, group: int | None, damp: float = 0.01):
    """Algorithm 1 of Frantar et al. with symmetric int4 (codes -7..7, fp32 scale = amax/7):
    one column at a time, the scale fixed at each group's first column from current weights."""
    W = w.clone().double()
    H = h.clone().double()
    d = W.shape[1]
    H += damp * torch.diag(H).mean() * torch.eye(d, dtype=torch.float64)
    U = torch.linalg.cholesky(torch.linalg.inv(H)).T  # upper Cholesky factor of H^-1
    Q = torch.zeros_like(W)
    scale = (W.abs().amax(1) / 7).float().double()
    for j in range(d):
        if group is not None and j % group == 0:
            scale = (W[:, j : j + group].float().abs().amax(1) / 7).double()
        Q[:, j] = torch.round(W[:, j] / scale).clamp(-7, 7) * scale
        err = (W[:, j] - Q[:, j]) / U[j, j]
        W[:, j:] -= err[:, None] * U[j, j:][None, :]
    return Q.float()


def calib(seed: int = 0, n: int = 512, d: int = 64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g) * 0.5 + torch.eye(d)
    return torch.randn(n, d, generator=g) @ mix


def test_element_tables_are_the_formats_grids() -> None:
    assert element_table("int4", ()).tolist() == list(range(-7, 8))
    assert element_table("q4_0", ()).tolist() == list(range(-8, 8))
    assert element_table("nvfp4", ()).abs().unique().tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def test_gptq_per_channel_matches_algorithm_1() -> None:
    x = calib()
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))
    ours = gptq(w, hessian(x), "int4", {"granularity": "channel"}, block_columns=16)
    ref = paper_gptq(w, hessian(x), None)
    assert (ours.weight - ref).abs().max() < 1e-4
    assert (ours.weight == ref).float().mean() > 0.99


def test_gptq_grouped_matches_algorithm_1_with_groups() -> None:
    x = calib(2)
    w = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    ours = gptq(w, hessian(x), "int4", {"granularity": 16}, block_columns=32)
    ref = paper_gptq(w, hessian(x), 16)
    assert (ours.weight - ref).abs().max() < 1e-4


def test_gptq_lowers_the_layer_output_error_and_stays_in_format() -> None:
    x = calib(4)
    w = torch.randn(32, 64, generator=torch.Generator().manual_seed(5)) * 0.1
    for fmt, opts in [("int4", {"granularity": 32}), ("q4_0", {}), ("nvfp4", {}), ("mxfp4", {})]:
        r = gptq(w, hessian(x), fmt, opts)
        rtn = quantize(w, fmt, **opts).dequantize()
        err = lambda q: float((x @ w.T - x @ q.T).pow(2).mean())  # noqa: E731
        assert err(r.weight) < 0.8 * err(rtn), fmt
        assert r.nbytes == quantize(w, fmt, **opts).nbytes


def test_a_dead_input_gets_a_zero_column() -> None:
    x = calib(6)
    x[:, 3] = 0
    r = gptq(torch.randn(8, 64), hessian(x), "int4", {"granularity": 32})
    assert torch.all(r.weight[:, 3] == 0)


def test_awq_protects_a_salient_channel() -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1024, 64, generator=g)
    x[:, 5] *= 30  # one channel with large activations, as in LLMs
    w = torch.randn(32, 64, generator=g) * 0.05
    r = awq([w], x, "int4", {"granularity": 64})
    rtn = quantize(w, "int4", granularity=64).dequantize()
    err = lambda q: float((x @ w.T - x @ q.T).pow(2).mean())  # noqa: E731
    assert r.alpha > 0
    assert err(r.weights[0]) < 0.9 * err(rtn)
    assert r.losses[0] == min(r.losses[:1])  # alpha = 0 is plain RTN
    assert abs(r.losses[0] - err(rtn)) < 1e-6 * max(1.0, err(rtn))
