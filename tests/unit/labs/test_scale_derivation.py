"""scale-derivation, run through EventContext as the worker runs it."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from labs import scale_derivation as lab
from tests.unit.labs.helpers import run_lab


@pytest.fixture(scope="module")
def default_run():
    return run_lab(lab)


def test_default_int8_scale_step_by_step(default_run):
    import torch

    result, events = default_run
    assert {"progress", "log", "table", "metric", "plot"} <= {k for k, _ in events}
    assert result.amax == 7.5 and result.qmax == 127
    assert result.scale == float(torch.tensor(7.5) / 127)  # float32 division
    assert result.matches_labs_quant is True
    assert result.clipped == 0 and result.error.clipping_mse == 0
    by_x = {s.x: s for s in result.elements}
    outlier = by_x[7.5]
    assert outlier.code == "127" and outlier.dequantized == 7.5 and not outlier.clipped
    small = by_x[float(torch.tensor(0.05))]
    assert small.code == "1"  # 0.05 / 0.059 = 0.85 rounds to 1: an 18 % error
    assert small.error == pytest.approx(result.scale - small.x, rel=1e-6)
    for s in result.elements:
        assert s.dequantized == pytest.approx(int(s.code) * result.scale, rel=1e-6)


def test_zero_tensor_naive_division_is_nan_guarded_is_exact_zero(default_run):
    zero = default_run[0].zero_case
    assert zero.naive_scale == 0 and zero.naive_has_nan
    assert all(v == "nan" for v in zero.naive_dequantized)
    assert zero.eps_scale > 0 and zero.eps_dequantized_all_zero
    assert zero.labs_quant_dequantized_all_zero and not zero.labs_quant_has_nan
    assert zero.clamp_of_nan == "nan"


@pytest.mark.parametrize("fmt", ["int4", "fp8_e5m2", "nvfp4", "mxfp4"])
def test_all_zero_input_gives_exact_zeros(fmt):
    result, _ = run_lab(lab, {"values": [0.0, 0.0, 0.0, 0.0], "format": fmt})
    assert all(s.dequantized == 0 and s.error == 0 for s in result.elements)
    assert result.error.mse == 0 and result.error.sqnr_db is None
    assert result.zero_case.naive_has_nan and not result.zero_case.labs_quant_has_nan


def test_cast_then_clamp_gives_inf_and_nan_clamp_then_cast_is_finite(default_run):
    casts = {c.dtype: c for c in default_run[0].casts}
    e5m2, e4m3 = casts["float8_e5m2"], casts["float8_e4m3fn"]
    # torch's float32 -> float8_e5m2 cast overflows to inf; a signed sum of infs is NaN.
    assert e5m2.cast_then_clamp_nonfinite > 0
    assert "inf" in e5m2.cast_then_clamp and e5m2.dot_cast_then_clamp == "nan"
    for c in (e5m2, e4m3):
        assert c.clamp_then_cast_nonfinite == 0
        assert all(isinstance(v, float) and math.isfinite(v) for v in c.clamp_then_cast)
        beyond = [i for i, label in enumerate(c.probes) if label != "0.5·max"]
        assert {abs(c.clamp_then_cast[i]) for i in beyond} == {c.max_finite}
        assert isinstance(c.dot_clamp_then_cast, float)
    assert e4m3.max_finite == 448 and e5m2.max_finite == 57344


def test_mxfp4_floor_scale_clips_the_block_max():
    result, _ = run_lab(lab, {"format": "mxfp4"})
    block = result.blocks[0]
    assert block.amax == 7.5 and block.stored_scale == 1.0  # 2^(floor(log2 7.5) - 2)
    assert result.scale is None and result.matches_labs_quant
    clipped = [s for s in result.elements if s.clipped]
    assert [s.x for s in clipped] == [7.5] and clipped[0].dequantized == 6.0
    n = len(result.elements)
    assert result.error.clipping_mse == pytest.approx(1.5**2 / n)
    assert result.error.rounding_mse > 0


def test_nvfp4_two_level_scale():
    result, _ = run_lab(lab, {"format": "nvfp4"})
    assert result.scale == pytest.approx(7.5 / (448 * 6), rel=1e-6)
    assert result.blocks[0].stored_scale == 448  # amax_b / 6 / tensor_scale rounded to E4M3
    assert result.first_block_scale == pytest.approx(7.5 / 6, rel=1e-6)
    assert result.matches_labs_quant


def test_clip_percentile_and_manual_scale_clip():
    result, _ = run_lab(lab, {"clip_percentile": 90})
    assert result.scale_source == "percentile" and result.matches_labs_quant is None
    assert result.clipped >= 1 and result.error.clipping_mse > result.error.rounding_mse
    outlier = next(s for s in result.elements if s.x == 7.5)
    assert outlier.clipped and outlier.code == "127"
    result, _ = run_lab(lab, {"format": "fp8_e4m3", "scale": 0.01})
    assert result.scale == pytest.approx(0.01)
    clipped = [s for s in result.elements if s.clipped]
    assert [s.x for s in clipped] == [7.5] and clipped[0].dequantized == pytest.approx(4.48)


@pytest.mark.parametrize(
    "bad",
    [
        {"values": [1.0, float("nan")]},
        {"values": [float("inf")]},
        {"values": [1e39]},  # finite in Python, inf in float32
        {"values": []},
        {"values": [0.5] * 4097},
        {"values": ["a"]},
        {"format": "nf4"},
        {"format": "nvfp4", "scale": 0.1},
        {"format": "mxfp4", "clip_percentile": 90},
        {"scale": 0.1, "clip_percentile": 90},
        {"scale": 0},
        {"scale": -1},
        {"scale": 1e-40},
        {"clip_percentile": 10},
        {"clip_percentile": 101},
        {"value": [1.0]},
    ],
)
def test_bad_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        lab.Params.model_validate(bad)
