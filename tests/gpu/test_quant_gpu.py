"""The same quantizers on CUDA agree with the CPU bit for bit (run where CUDA exists)."""

import math

import pytest
import torch

from labs.quant import FORMATS, quantize
from labs.quant.matmul import quantized_matmul

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

OPTION_SETS: dict[str, list[dict[str, object]]] = {
    "int8": [{}, {"granularity": "tensor"}, {"granularity": 32, "zero_point": True}],
    "int4": [{}, {"granularity": "channel", "zero_point": True}],
    "fp8_e4m3": [{}, {"granularity": "channel"}, {"granularity": 32}],
    "fp8_e5m2": [{}, {"granularity": 64}],
    "mxfp8_e4m3": [{}, {"scale_rounding": "rceil"}],
    "mxfp8_e5m2": [{}, {"scale_rounding": "rceil"}],
    "mxfp6_e2m3": [{}, {"scale_rounding": "rceil"}],
    "mxfp6_e3m2": [{}, {"scale_rounding": "rceil"}],
    "mxfp4": [{}, {"scale_rounding": "rceil"}],
    "nvfp4": [{}],
    "nf4": [{}, {"double_quant": True}],
    "q8_0": [{}],
    "q4_0": [{}],
    "q4_1": [{}],
    "q4_k": [{}],
    "q6_k": [{}],
}
CASES = [(key, options) for key in sorted(FORMATS) for options in OPTION_SETS[key]]


def inputs():
    gen = torch.Generator().manual_seed(7)
    normal = torch.randn(64, 1000, generator=gen)
    ties = torch.randint(-64, 65, (32, 256), generator=gen).float() / 8
    outliers = torch.randn(16, 512, generator=gen)
    outliers[:, ::37] *= 100
    zeros = torch.zeros(8, 96)
    zeros[2:4] = torch.randn(2, 96, generator=gen)
    return {
        "normal": normal,
        "ties": ties,
        "outliers": outliers,
        "zeros": zeros,
        "3d": normal.reshape(8, 8, 1000),
    }


@pytest.mark.parametrize(("key", "options"), CASES)
@pytest.mark.parametrize("name", sorted(inputs()))
def test_cuda_matches_cpu_bit_for_bit(key, options, name):
    x = inputs()[name]
    if key in ("q8_0", "q4_0", "q4_1", "q4_k", "q6_k"):
        x = x.clamp(-1000, 1000)
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        cpu = quantize(xd, key, **options)
        gpu = quantize(xd.cuda(), key, **options)
        assert gpu.codes.is_cuda and gpu.dequantize().is_cuda
        assert torch.equal(cpu.codes, gpu.codes.cpu())
        assert torch.equal(cpu.scales, gpu.scales.cpu())
        for field, value in cpu.fields.items():
            assert torch.equal(value, gpu.fields[field].cpu()), field
        assert torch.equal(cpu.dequantize(), gpu.dequantize().cpu())
        assert cpu.to_bytes() == gpu.to_bytes()
        assert cpu.nbytes == gpu.nbytes


@pytest.mark.parametrize("key", sorted(FORMATS))
def test_cuda_nonfinite_error_names_the_same_index(key):
    x = torch.randn(4, 64)
    x[2, 33] = math.nan
    with pytest.raises(ValueError, match=r"at index \(2, 33\)"):
        quantize(x.cuda(), key)


@pytest.mark.parametrize("key", ["int8", "mxfp4", "nvfp4", "q4_1", "nf4"])
def test_cuda_matmul_matches_cpu(key):
    gen = torch.Generator().manual_seed(3)
    a, w = torch.randn(16, 256, generator=gen), torch.randn(24, 256, generator=gen)
    cpu = quantized_matmul(a, quantize(w, key))
    gpu = quantized_matmul(a.cuda(), quantize(w.cuda(), key))
    assert torch.allclose(cpu, gpu.cpu(), rtol=1e-6, atol=1e-6)
