"""The native q4_k/q6_k quantizer (labs/quant/_kquants.c) against the torch pipeline.

The torch pipeline is the reference (it matches llama.cpp's digests, test_gguf_k.py runs
those on both): here the native kernel must give the same codes, the same fields bit for
bit and the same bytes on every kind of input, and hand back to the torch pipeline
exactly where it says it does (non-finite values, fp16 overflow).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labs.quant import quantize
from labs.quant.formats import gguf_k

KEYS = ("q4_k", "q6_k")

# Without a C compiler at install there is nothing to compare (test_kquants_install.py
# fails where a compiler exists and the kernel was still not built).
pytestmark = pytest.mark.skipif(
    gguf_k.KERNEL is None, reason="labs.quant._kquants not built (no C compiler at install)"
)


def torch_pipeline(x, key, **options):
    saved, gguf_k.KERNEL = gguf_k.KERNEL, None
    try:
        return quantize(x, key, **options)
    finally:
        gguf_k.KERNEL = saved


def same(a, b):
    assert torch.equal(a.qdata, b.qdata)
    assert a.fields.keys() == b.fields.keys()
    for name in a.fields:
        assert a.fields[name].dtype == b.fields[name].dtype, name
        # bit for bit, signed zeros included
        assert (
            a.fields[name].view(torch.uint8).tolist() == b.fields[name].view(torch.uint8).tolist()
        ), name
    assert a.to_bytes() == b.to_bytes()
    torch.testing.assert_close(a.dequantize(), b.dequantize(), rtol=0, atol=0, equal_nan=True)


def inputs():
    gen = torch.Generator().manual_seed(7)
    normal = torch.randn(6, 768, generator=gen)
    spiky = normal.clone()
    spiky[:, ::29] *= 300
    grid = (torch.randn(6, 768, generator=gen) * 4).round() / 4  # ties everywhere
    zeros = normal.clone()
    zeros[0] = 0
    zeros[1, :48] = 0
    zeros[2, ::2] = 0
    flat = normal.clone()
    flat[3, :32] = 0.75
    flat[3, 32:64] = -1.25
    return {
        "normal": normal,
        "spiky": spiky,
        "grid": grid,
        "zeros": zeros,
        "flat": flat,
        "positive": normal.abs() + 0.5,
        "negative": -normal.abs() - 0.5,
        "tiny": normal * 1e-30,  # subnormal fp16 scales, many rounding to 0
        "subnormal": normal * 1e-39,  # float32 subnormals
        "large": normal * 3e4,
        "mixed": normal * torch.logspace(-12, 3, 768)[None],
    }


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("name", sorted(inputs()))
def test_native_matches_torch_on_every_kind_of_input(key, name):
    x = inputs()[name]
    same(quantize(x, key), torch_pipeline(x, key))


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize(
    "shape",
    [
        (256,),
        (1, 100_000),
        (70_001,),
        (5, 96),
        (3, 300),
        (9, 4096),
        (2, 3, 512),
        (1, 16),
        (40, 272),
    ],
)
def test_native_matches_torch_on_every_layout(key, shape):
    # Rows of whole super-blocks, rows with a partial last super-block, one long row cut
    # into its whole super-blocks and a partial rest, padding of a partial sub-block.
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape)))
    same(quantize(x, key), torch_pipeline(x, key))


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_native_takes_every_float_dtype_and_layout_of_memory(key, dtype):
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(3)).to(dtype)
    same(quantize(x, key), torch_pipeline(x, key))
    strided = x.t()  # not contiguous
    same(quantize(strided, key), torch_pipeline(strided, key))


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(KEYS),
    rows=st.integers(1, 4),
    cols=st.integers(1, 700),
    scale=st.sampled_from([1e-20, 1e-3, 1.0, 1e3]),
    seed=st.integers(0, 2**16),
)
def test_native_matches_torch_property(key, rows, cols, scale, seed):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * scale
    same(quantize(x, key), torch_pipeline(x, key))


@pytest.mark.parametrize("key", KEYS)
def test_non_finite_input_is_left_to_the_torch_pipeline(key, monkeypatch):
    x = torch.randn(4, 512)
    x[2, 300] = float("nan")
    with pytest.raises(ValueError, match="non-finite value nan at index \\(2, 300\\)"):
        quantize(x, key)
    # propagate: the torch pipeline's NaN super-block, everything else identical
    same(quantize(x, key, nonfinite="propagate"), torch_pipeline(x, key, nonfinite="propagate"))
    # and the kernel itself reports it (status 1) rather than guessing
    calls = []
    kernel = gguf_k.KERNEL

    class Spy:
        def __getattr__(self, name):
            def call(*args):
                calls.append(getattr(kernel, name)(*args))
                return calls[-1]

            return call

    monkeypatch.setattr(gguf_k, "KERNEL", Spy())
    quantize(x, key, nonfinite="propagate")
    assert kernel.NONFINITE in calls


@pytest.mark.parametrize("key", KEYS)
def test_fp16_overflow_is_left_to_the_torch_pipeline(key):
    x = torch.randn(2, 256) * 1e9  # super-block scales beyond fp16's 65504
    with pytest.raises(ValueError, match="too large for the format's scale type"):
        quantize(x, key)
    same(quantize(x, key, nonfinite="propagate"), torch_pipeline(x, key, nonfinite="propagate"))


def test_the_kernel_rejects_buffers_too_small():
    x = torch.randn(512)
    codes = torch.empty(511, dtype=torch.uint8)
    d = torch.empty(2, dtype=torch.float16)
    sc = torch.empty(32, dtype=torch.int8)
    with pytest.raises(ValueError, match="codes: 511 bytes, need 512"):
        gguf_k.KERNEL.q6_k(x.numpy(), 1, 512, codes.numpy(), d.numpy(), sc.numpy())
    with pytest.raises(ValueError, match="multiple of 16"):
        gguf_k.KERNEL.q6_k(x.numpy(), 1, 500, codes.numpy(), d.numpy(), sc.numpy())
