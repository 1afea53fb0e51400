"""GPTQ and AWQ against the papers' algorithms on hand-checkable tiny cases.

gptqmodel 7.7 needs torch >= 2.14.1 and llmcompressor 0.14 needs transformers <= 5.17
(plus datasets, accelerate, auto-round), so neither installs beside the pinned torch
2.13.0 / transformers 5.23.0; the reference here is GPTQ's Algorithm 1 written out
column by column, without lazy batching, and AWQ's grid search written out directly.
"""

from __future__ import annotations

import pytest
import torch

from labs.quant import quantize
from labs.quant.awq import SwiGLU, awq, clip_search
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


def autoawq_best_clip(w: torch.Tensor, x: torch.Tensor, group: int) -> torch.Tensor:
    """AutoAWQ's ``_compute_best_clip`` (n_grid 20, max_shrink 0.5, 512 sampled tokens)
    with its symmetric ``pseudo_quantize_tensor`` (w_bit 4), transcribed as written:
    broadcast products summed over each group."""

    def pseudo_quantize(v: torch.Tensor) -> torch.Tensor:
        shape = v.shape
        v = v.reshape(-1, group)
        scales = v.abs().amax(dim=1, keepdim=True).clamp(min=1e-5) / 7
        return (torch.clamp(torch.round(v / scales), -8, 7) * scales).reshape(shape)

    co = w.shape[0]
    feat = x.reshape(1, x.shape[0], -1, group)
    feat = feat[:, :: max(1, feat.shape[1] // 512)]
    w = w.reshape(co, 1, -1, group)
    org_max = w.abs().amax(dim=-1, keepdim=True)
    best = org_max.clone()
    min_errs = torch.ones_like(org_max) * 1e9
    org_out = (feat * w).sum(dim=-1)
    for i_s in range(10):
        max_val = org_max * (1 - i_s / 20)
        q_w = pseudo_quantize(torch.clamp(w, -max_val, max_val))
        err = ((feat * q_w).sum(dim=-1) - org_out).pow(2).mean(dim=1).view(min_errs.shape)
        better = err < min_errs
        min_errs[better] = err[better]
        best[better] = max_val[better]
    return best.squeeze(1).squeeze(-1)


def test_clip_search_matches_autoawq() -> None:
    torch.manual_seed(11)
    w = torch.distributions.StudentT(3.0).sample((64, 256)) * 0.02  # heavy tails: worth clipping
    x = calib(12, n=1500, d=256)
    ours = clip_search(w, x, "int4", {"granularity": 128}, 128)
    ref = autoawq_best_clip(w, x, 128)
    assert ours.shape == ref.shape == (64, 2)
    # Same algorithm; the group sums run in another order, so a near-tie may fall the
    # other way in a rare group.
    assert (ours == ref).float().mean() >= 0.98
    assert (ours < w.reshape(64, 2, 128).abs().amax(-1)).any()  # some groups were clipped


def test_awq_clipping_lowers_the_output_error_and_spares_q_and_k() -> None:
    torch.manual_seed(13)
    x = calib(14, n=1024, d=256)
    w = torch.distributions.StudentT(3.0).sample((64, 256)) * 0.02
    err = lambda q: float((x @ w.T - x @ q.T).pow(2).mean())  # noqa: E731
    plain = awq([w], x, "int4", {"granularity": 128}, clip=False)
    clipped = awq([w], x, "int4", {"granularity": 128}, clip=True)
    assert clipped.alpha == plain.alpha and clipped.losses == plain.losses
    assert err(clipped.weights[0]) < 0.95 * err(plain.weights[0])
    assert plain.clipped == [0.0] and clipped.clipped[0] > 0
    both = awq([w, w], x, "int4", {"granularity": 128}, clip=[False, True])
    assert torch.equal(both.weights[0], plain.weights[0])
    assert torch.equal(both.weights[1], clipped.weights[0])
    rtn = awq([w], x, "int4", {"granularity": 128}, n_grid=1, clip=False)  # no scale search
    assert rtn.alpha == 0 and torch.equal(
        rtn.weights[0], quantize(w, "int4", granularity=128).dequantize()
    )


@pytest.mark.parametrize(
    ("key", "options", "group"),
    [("nvfp4", {}, 16), ("fp8_e4m3", {}, None), ("int4", {"granularity": "tensor"}, None)],
)
def test_clip_search_with_a_per_tensor_scale_tries_each_shrink_alone(
    key: str, options: dict[str, object], group: int | None
) -> None:
    """nvfp4's second-level scale and fp8's (or per-tensor int4's) one scale span the
    tensor: the shrinks cannot share one quantize call (the stack's maximum would set
    it), so each is quantized alone, as one at a time would."""
    from labs.quant.awq import CLIP_GRID, clamp_groups

    torch.manual_seed(17)
    w = torch.distributions.StudentT(3.0).sample((32, 64)) * 0.02
    x = calib(18, n=600, d=64)
    ours = clip_search(w, x, key, options, group)
    gs = group or 64
    xs = x[:: max(1, x.shape[0] // 512)].reshape(-1, 64 // gs, gs)
    org_max = w.reshape(32, 64 // gs, gs).abs().amax(-1)
    org_out = torch.einsum("ogk,tgk->ogt", w.reshape(32, 64 // gs, gs), xs)
    best, min_err = org_max.clone(), torch.full_like(org_max, 1e9)
    for i in range(10):
        max_val = org_max * (1 - i / CLIP_GRID)
        q = quantize(clamp_groups(w, max_val), key, **options).dequantize()
        err = torch.einsum("ogk,tgk->ogt", q.reshape(32, 64 // gs, gs), xs) - org_out
        err = err.pow(2).mean(-1)
        better = err < min_err
        min_err[better], best[better] = err[better], max_val[better]
    assert (ours == best).float().mean() >= 0.98  # noqa: PLR2004
    assert (ours < org_max).any()


@pytest.mark.parametrize(
    ("key", "options"),
    [
        ("int4", {}),
        ("nf4", {}),
        ("nvfp4", {}),
        ("nf4", {"double_quant": True}),
        ("fp8_e4m3", {}),
        ("int4", {"granularity": "tensor"}),
    ],
)
def test_awq_scores_linears_that_share_an_input_as_each_alone(
    key: str, options: dict[str, object]
) -> None:
    """q/k/v share one scale search: each α's loss is the sum of each linear's own loss,
    whether the format lets their rows be quantized stacked (int4, nf4) or a scale spans
    the tensor and each must be quantized alone (nvfp4, fp8, per-tensor int4, and nf4
    with double quantization, whose block scales share an offset over the tensor)."""
    x = calib(20, n=256, d=64)
    ws = [torch.randn(n, 64, generator=torch.Generator().manual_seed(n)) * 0.05 for n in (32, 16)]
    both = awq(ws, x, key, options, n_grid=5, clip=False)
    alone = [awq([w], x, key, options, n_grid=5, clip=False) for w in ws]
    expected = [a + b for a, b in zip(alone[0].losses, alone[1].losses, strict=True)]
    assert both.losses == pytest.approx(expected, rel=1e-6)


def test_gptq_stacks_only_the_linears_whose_rows_are_independent() -> None:
    """The lab runs q/k/v (and gate/up) as one GPTQ pass when that changes no row's bits;
    with a scale that spans the tensor each linear keeps its own."""
    from labs.quant_algorithms.compute import _shared_input_sets

    x, y = torch.randn(8, 64), torch.randn(8, 128)
    inputs = {"q": x, "k": x, "v": x, "o": y}
    originals = {"q": torch.randn(8, 64), "k": torch.randn(4, 64), "v": torch.randn(4, 64)}
    originals["o"] = torch.randn(8, 128)
    assert _shared_input_sets(inputs, originals, "int4", {}) == [["q", "k", "v"], ["o"]]
    for key, options in [
        ("fp8_e4m3", {}),
        ("nvfp4", {}),
        ("nf4", {"double_quant": True}),
        ("int8", {"granularity": "tensor"}),
    ]:
        sets = _shared_input_sets(inputs, originals, key, options)
        assert sets == [["q"], ["k"], ["v"], ["o"]], key


def salient_mlp(seed: int = 0, d: int = 64, ff: int = 96, n: int = 1024):
    """Calibration inputs with one channel 30× the others, and an MLP's gate, up, down."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    x[:, 3] *= 30
    gate, up = (torch.randn(ff, d, generator=g) * 0.05 for _ in range(2))
    return x, [gate, up], torch.randn(d, ff, generator=g) * 0.05


def swiglu_out(x: torch.Tensor, ws: list[torch.Tensor], down: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.silu(x @ ws[0].T) * (x @ ws[1].T)) @ down.T


@pytest.mark.parametrize("step", [2**-4, 2**-8])  # a 4-bit and an 8-bit format's relative error
def test_the_mlp_search_scores_the_change_in_bfloat16_as_float64_would(step: float) -> None:
    """AWQ's MLP loss from the change of the output (``x·ΔWᵀ``, then ``Δh·downᵀ``) in
    bfloat16 is within 10⁻³ of float64's mean((y − ŷ)²): the rounding is relative to the
    change. The same bfloat16 products of the whole outputs are not (3 % off for a
    4-bit-sized change, 170 % for an 8-bit one), which is why the search does not use them."""
    x, ws, down = salient_mlp()
    g = torch.Generator().manual_seed(1)
    deq = [w + torch.randn(w.shape, generator=g) * step * float(w.abs().mean()) for w in ws]

    def loss(dtype: torch.dtype) -> float:
        y = swiglu_out(x.to(dtype), [w.to(dtype) for w in ws], down.to(dtype))
        y_hat = swiglu_out(x.to(dtype), [w.to(dtype) for w in deq], down.to(dtype))
        return float((y.double() - y_hat.double()).pow(2).mean())

    exact = loss(torch.float64)
    assert SwiGLU(down).change_loss(x, ws, torch.bfloat16)(deq) == pytest.approx(exact, rel=1e-3)
    assert loss(torch.bfloat16) != pytest.approx(exact, rel=1e-2)


@pytest.mark.parametrize(
    ("key", "options"), [("int4", {"granularity": 64}), ("int8", {}), ("q4_0", {}), ("nvfp4", {})]
)
def test_the_mlp_search_in_bfloat16_picks_the_float32_scale(
    key: str, options: dict[str, object]
) -> None:
    """The whole α grid scored in bfloat16 and in float32 (differences of float32 outputs,
    as the references compute it): the same α, so bit-identical weights, and every α's
    loss within 0.3 %."""
    x, ws, down = salient_mlp()
    fast = awq(ws, x, key, options, block=SwiGLU(down), dtype=torch.bfloat16, clip=False)
    exact = awq(ws, x, key, options, block=SwiGLU(down), dtype=torch.float32, clip=False)
    assert fast.alpha == exact.alpha > 0
    assert all(torch.equal(a, b) for a, b in zip(fast.weights, exact.weights, strict=True))
    assert fast.losses == pytest.approx(exact.losses, rel=3e-3)
    plain = awq(ws, x, key, options, block=lambda x, w: swiglu_out(x, w, down), clip=False)
    assert plain.losses == exact.losses  # float32 scores as any block would be scored
