"""labs.quant.matmul: scales after the dot product vs inside the reduction."""

import pytest
import torch

from labs.quant import quantize
from labs.quant.matmul import quantized_matmul, scale_placement_error


def data(m=8, n=12, k=256, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen)
    w = torch.randn(n, k, generator=gen) * torch.logspace(-2, 1, k)[None, :].flip(1)
    return a, w


def reference(a, w_q, a_q=None):
    a_hp = a_q.dequantize() if a_q is not None else a
    return a_hp.double() @ w_q.dequantize().double().T


CASES = [
    ("int8", {"granularity": "tensor"}),
    ("int8", {"granularity": "channel"}),
    ("int8", {"granularity": "channel", "zero_point": True}),
    ("int4", {"granularity": 64, "zero_point": True}),
    ("fp8_e4m3", {}),
    ("fp8_e5m2", {"granularity": 32}),
    ("mxfp4", {}),
    ("mxfp6_e3m2", {}),
    ("mxfp8_e4m3", {}),
    ("nvfp4", {}),
    ("nf4", {}),
    ("q8_0", {}),
    ("q4_0", {}),
    ("q4_1", {}),
]


@pytest.mark.parametrize(("key", "options"), CASES)
def test_matches_dequantize_then_matmul(key, options):
    a, w = data()
    w_q = quantize(w, key, **options)
    y = quantized_matmul(a, w_q)
    assert y.shape == (8, 12) and y.dtype == torch.float32
    assert torch.allclose(y.double(), reference(a, w_q), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("key", "options"), CASES)
def test_both_operands_quantized(key, options):
    a, w = data(k=192)
    if key == "nf4":
        a, w = data(k=256)
    a_q, w_q = quantize(a, key, **options), quantize(w, key, **options)
    y = quantized_matmul(a_q, w_q, out_dtype=torch.float64)
    assert torch.allclose(y, reference(a, w_q, a_q), rtol=1e-5, atol=1e-5)


def test_k_not_a_multiple_of_the_block_is_padded_with_zeros():
    a, w = data(k=100)
    w_q = quantize(w, "q4_0")
    assert w_q.padded
    assert torch.allclose(
        quantized_matmul(a, w_q).double(), reference(a, w_q), rtol=1e-5, atol=1e-5
    )


def test_block_scales_after_the_dot_product_are_wrong():
    a, w = data()
    for key in ("mxfp4", "nvfp4", "q4_0", "int4"):
        report = scale_placement_error(a, quantize(w, key)).as_dict()
        assert report["scales_vary_along_k"]
        assert report["inside_relative_rms_error"] < 1e-6
        assert report["after_relative_rms_error"] > 0.05, key


def test_channel_scales_after_the_dot_product_are_exact():
    a, w = data()
    for options in ({"granularity": "channel"}, {"granularity": "tensor"}):
        report = scale_placement_error(a, quantize(w, "int8", **options)).as_dict()
        assert not report["scales_vary_along_k"]
        assert report["after_relative_rms_error"] < 1e-6


def test_integer_dot_products_are_exact_before_scaling():
    a, w = data(k=64)
    a_q = quantize(a, "int8", granularity="tensor")
    w_q = quantize(w, "int8", granularity="channel")
    codes_dot = a_q.codes.long() @ w_q.codes.long().T  # what an int8 GEMM accumulates
    y = quantized_matmul(a_q, w_q, out_dtype=torch.float64)
    expected = codes_dot.double() * a_q.scales.double() * w_q.scales.double()[None, :]
    assert torch.allclose(y, expected, rtol=1e-12, atol=0)


def test_errors():
    a, w = data(k=96)
    with pytest.raises(ValueError, match="different block lengths"):
        quantized_matmul(quantize(a, "nvfp4"), quantize(w, "mxfp4"))
    with pytest.raises(ValueError, match="multiple of its block size"):
        quantized_matmul(a, quantize(w, "nf4"))
    with pytest.raises(ValueError, match="inner dimensions"):
        quantized_matmul(a[:, :64], quantize(w, "q8_0"))
    with pytest.raises(TypeError):
        quantized_matmul(a, w)
    with pytest.raises(ValueError, match="row_scale"):
        scale_placement_error(a, quantize(w, "q8_0"), row_scale="median")
