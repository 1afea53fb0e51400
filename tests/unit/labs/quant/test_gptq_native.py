"""GPTQ's column loop in C (labs/quant/_gptq.c) against its torch loop (gptq._columns).

The torch loop is the reference (it is the reference implementation's arithmetic, and
the lab's GPTQ results were pinned on it): with the kernel built, every format, with and
without act_order and at every granularity the lab offers, must give the same weights bit
for bit, the same proxy loss and the same bytes, on weights with a dead input column, a
block of columns that is not full, and salient channels.
"""

import pytest
import torch

from labs.lm.spec import GRANULAR, format_options
from labs.quant import FORMATS
from labs.quant import gptq as G

pytestmark = pytest.mark.skipif(
    G.NATIVE is None, reason="labs.quant._gptq not built (no C compiler at install)"
)

CASES = [
    (key, gran)
    for key in FORMATS
    for gran in ("default", "channel", "tensor", 64)
    if gran == "default" or key in GRANULAR
]


def torch_loop(*args, **kwargs):
    saved, G.NATIVE = G.NATIVE, None
    try:
        return G.gptq(*args, **kwargs)
    finally:
        G.NATIVE = saved


def problem(out: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, width, generator=g) * (1 + 3 * torch.rand(1, width, generator=g))
    x = torch.randn(384, width, generator=g) * (1 + 5 * torch.rand(width, generator=g))
    x[:, 3] = 0.0  # a dead input: H_33 = 0
    x[:, 7] *= 30.0  # a salient channel
    return w, G.hessian(x)


@pytest.mark.parametrize(("key", "gran"), CASES)
@pytest.mark.parametrize("act_order", [False, True])
def test_the_kernel_gives_the_torch_loops_numbers(key, gran, act_order):
    options = format_options(key, gran)
    # 320 columns: two full blocks of 128 and one of 64; 48 rows.
    w, h = problem(48, 320, seed=len(key) * 7 + act_order)
    native = G.gptq(w, h, key, options, act_order=act_order, damp=0.02)
    reference = torch_loop(w, h, key, options, act_order=act_order, damp=0.02)
    assert torch.equal(native.weight.view(torch.int32), reference.weight.view(torch.int32))
    assert native.proxy_loss == reference.proxy_loss
    assert native.nbytes == reference.nbytes
    assert native.proxy_loss > 0  # something was rounded: the comparison is not vacuous


def test_both_loops_number_the_rounding_modes_alike():
    assert (G.NATIVE.SYMMETRIC, G.NATIVE.SHIFTED, G.NATIVE.TABLE) == (
        G.SYMMETRIC,
        G.SHIFTED,
        G.TABLE,
    )


def test_the_kernel_runs_without_the_interpreter_lock():
    """Two threads in the kernel at once must both finish with their own results (the
    sets of a layer run on the chunk threads side by side)."""
    from concurrent.futures import ThreadPoolExecutor

    problems = [problem(256, 256, seed) for seed in range(4)]
    alone = [G.gptq(w, h, "q4_0").weight for w, h in problems]
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda p: G.gptq(p[0], p[1], "q4_0").weight, problems))
    assert all(torch.equal(a, b) for a, b in zip(alone, together, strict=True))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"k": 5}, "w: "),  # buffers smaller than k·out floats
        ({"b": 9}, "0 <= a <= b <= k"),
        ({"a": 3, "b": 2}, "0 <= a <= b <= k"),
        ({"mode": 7}, "unknown rounding mode 7"),
        ({"mode": 2, "table": torch.zeros(1)}, "at least 2 elements"),
    ],
)
def test_the_kernel_refuses_what_does_not_fit_its_buffers(change, message):
    """A call whose sizes do not match its buffers raises; it never reads or writes
    outside them."""
    k, out = 4, 8
    args = {
        "w": torch.zeros(k, out),
        "q": torch.zeros(k, out),
        "e": torch.zeros(k, out),
        "hinv": torch.eye(k),
        "k": k,
        "out": out,
        "a": 0,
        "b": k,
        "scale": torch.ones(k, out),
        "offset": torch.zeros(k, out),
        "inv": torch.ones(k, out),
        "mode": G.SYMMETRIC,
        "lo": -8.0,
        "hi": 7.0,
        "table": torch.arange(-8.0, 8.0),
    }
    args |= change
    call = [v.numpy() if isinstance(v, torch.Tensor) else v for v in args.values()]
    with pytest.raises(ValueError, match=message):
        G.NATIVE.columns(*call)
