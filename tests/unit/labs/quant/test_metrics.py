"""labs.quant.metrics: definitions checked on cases worked by hand."""

import math

import pytest
import torch

from labs.quant import quantize
from labs.quant.metrics import (
    CLIP_RELATIVE_TOLERANCE,
    clipped_beyond,
    error_report,
    error_split,
    sqnr_db,
)


def test_report_fields_add_up():
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0)) * 3
    q = quantize(x, "nvfp4")
    r = error_report(x, q)
    err = q.dequantize().double() - x.double()
    assert r.mse == pytest.approx(err.pow(2).mean().item())
    assert r.rmse == pytest.approx(math.sqrt(r.mse))
    assert r.rounding_mse + r.clipping_mse == pytest.approx(r.mse)
    assert r.max_abs_error == pytest.approx(err.abs().max().item())
    assert r.mean_abs_error == pytest.approx(err.abs().mean().item())
    assert r.sqnr_db == pytest.approx(
        10 * math.log10(x.double().pow(2).sum().item() / err.pow(2).sum().item())
    )
    assert r.nbytes == q.nbytes == 64 * 256 // 2 + 64 * 256 // 16 + 4
    assert r.payload_bytes == 64 * 256 // 2
    assert r.scale_overhead_bytes == 64 * 256 // 16 + 4
    assert r.bits_per_value == pytest.approx(8 * q.nbytes / x.numel())
    assert r.as_dict()["sqnr_db"] == r["sqnr_db"] == r.sqnr_db


def test_q4_0_clipping_by_hand():
    # From the q4_0 golden block: d = 1 with range [-8, 7]; 8, 7.5 and 6.6... only 8 and
    # 7.5 lie beyond 7. Their errors (1 and 0.5) are clipping error; the rest rounding.
    x = torch.zeros(1, 32)
    x[0, :4] = torch.tensor([-8.0, 8.0, 7.5, 0.49])
    q = quantize(x, "q4_0")
    r = error_report(x, q)
    assert r.clipped_count == 2
    assert r.clipping_mse == pytest.approx((1.0**2 + 0.5**2) / 32)
    assert r.rounding_mse == pytest.approx(0.49**2 / 32)


def test_mx_floor_scale_clips_and_rceil_does_not():
    x = torch.zeros(1, 32)
    x[0, 0] = 7.5  # floor scale: X = 1, 7.5 > 6 is clipped; rceil: X = 2, no clipping
    floor = error_report(x, quantize(x, "mxfp4"))
    rceil = error_report(x, quantize(x, "mxfp4", scale_rounding="rceil"))
    assert floor.clipped_count == 1 and floor.clipping_mse == pytest.approx(1.5**2 / 32)
    assert rceil.clipped_count == 0 and rceil.clipping_mse == 0.0
    assert rceil.rounding_mse == pytest.approx(0.5**2 / 32)  # 7.5 / 2 = 3.75 -> 4 -> 8


def test_per_tensor_absmax_never_clips():
    x = torch.randn(32, 64) * 5
    for key in ("int8", "fp8_e4m3", "fp8_e5m2"):
        assert error_report(x, quantize(x, key, granularity="tensor")).clipped_count == 0


@pytest.mark.parametrize("key", ["int4", "int8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("granularity", ["tensor", "channel", 16, 32, 128])
def test_absmax_scales_clip_nothing_on_normal_data(key, granularity):
    # amax / qmax * qmax lands a few float32 ulps below amax in many blocks (int4 block 16
    # flagged hundreds of values before the tolerance): that is not clipping.
    x = torch.randn(256, 1024, generator=torch.Generator().manual_seed(0))
    r = error_report(x, quantize(x, key, granularity=granularity))
    assert r.clipped_count == 0 and r.clipping_mse == 0.0
    assert r.rounding_mse == r.mse


@pytest.mark.parametrize("key", ["int4", "int8", "fp8_e4m3"])
def test_a_scale_too_small_clips(key):
    # Scales derived for x, applied to 2x: a scale half of absmax / qmax.
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    q = quantize(x, key, granularity=32)
    r = error_report(2 * x, q)
    assert r.clipped_count > 0 and r.clipping_mse > 0
    assert r.rounding_mse + r.clipping_mse == pytest.approx(r.mse)


def test_clip_tolerance_is_relative_to_the_bound():
    hi = torch.tensor([4.0, 4.0, 1e-30])
    # One float32 ulp above 4, well beyond it, and an overshoot far larger than the
    # tolerance of a tiny bound.
    x = torch.tensor([torch.nextafter(torch.tensor(4.0), torch.tensor(5.0)).item(), 4.5, 1e-29])
    assert clipped_beyond(x, -hi, hi).tolist() == [False, True, True]
    edge = 4.0 * (1 + 2 * CLIP_RELATIVE_TOLERANCE)
    assert clipped_beyond(torch.tensor([edge, -edge]), -hi[:1], hi[:1]).tolist() == [True, True]


def test_error_split_checks_shapes():
    x = torch.zeros(4)
    with pytest.raises(ValueError, match="same shape"):
        error_split(x, torch.zeros(5), torch.zeros(4, dtype=torch.bool))


def test_exact_input_has_infinite_sqnr():
    x = torch.tensor([[1.0, -2.0, 0.5, 4.0] * 8])
    r = error_report(x, quantize(x, "mxfp4"))
    assert r.mse == 0 and math.isinf(r.sqnr_db) and r.sqnr_db > 0
    assert sqnr_db(x, x) == math.inf


def test_shape_mismatch_is_an_error():
    q = quantize(torch.randn(4, 32), "q8_0")
    with pytest.raises(ValueError, match="shape"):
        error_report(torch.randn(4, 33), q)
