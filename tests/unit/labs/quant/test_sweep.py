"""Registry-wide accuracy sweep: every format reaches its minimum SQNR on normal data."""

import pytest
import torch

from labs.quant import FORMATS, quantize
from labs.quant.metrics import sqnr_db

# Minimum SQNR (dB) on N(0, 1) data, 256 x 1024, default options. Rough rule: ~6 dB per
# element bit for uniform grids, less for floating-point elements (fewer mantissa bits).
MIN_SQNR_DB = {
    "int8": 41.0,  # per channel
    "q8_0": 44.0,
    "fp8_e4m3": 30.0,  # per tensor
    "mxfp8_e4m3": 29.5,
    "mxfp6_e2m3": 29.5,
    "fp8_e5m2": 24.0,
    "mxfp8_e5m2": 24.0,
    "mxfp6_e3m2": 24.0,
    "q6_k": 34.0,
    "q4_k": 22.0,
    "q4_1": 21.0,
    "q4_0": 20.0,
    "nf4": 19.5,
    "nvfp4": 19.5,
    "mxfp4": 17.5,
    "int4": 17.5,  # blocks of 128
}


def test_every_format_has_a_minimum():
    assert set(MIN_SQNR_DB) == set(FORMATS)


@pytest.fixture(scope="module")
def normal_data():
    return torch.randn(256, 1024, generator=torch.Generator().manual_seed(42))


@pytest.mark.parametrize("key", sorted(FORMATS))
def test_sqnr_on_normal_data(key, normal_data):
    q = quantize(normal_data, key)
    assert sqnr_db(normal_data, q.dequantize()) >= MIN_SQNR_DB[key]


def test_finer_granularity_is_never_worse(normal_data):
    x = normal_data * torch.linspace(0.1, 10, 256)[:, None]  # rows of different scale
    for key in ("int8", "int4", "fp8_e4m3"):
        tensor = sqnr_db(x, quantize(x, key, granularity="tensor").dequantize())
        channel = sqnr_db(x, quantize(x, key, granularity="channel").dequantize())
        block = sqnr_db(x, quantize(x, key, granularity=32).dequantize())
        assert tensor < channel < block, key
