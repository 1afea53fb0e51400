"""dot-product-scales, run through EventContext as the worker runs it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from labs import dot_product_scales as lab
from labs.dot_product_scales import compute
from tests.unit.labs.helpers import run_lab

# Scales applied correctly reproduce the float64 product of the dequantized operands up
# to the float32 output rounding.
EXACT = 1e-5


@pytest.fixture(scope="module")
def default_run():
    return run_lab(lab)


def test_block_scales_inside_the_reduction_are_exact_after_it_are_not(default_run):
    result, events = default_run
    assert {"progress", "log", "table", "metric", "plot"} <= {k for k, _ in events}
    a, b, c = result.placements
    assert b.rel_error_vs_dequantized < EXACT and a.rel_error_vs_dequantized < EXACT
    assert c.rel_error_vs_dequantized > 0.1
    assert result.rel_error_c > 10 * result.rel_error_b and result.c_over_b > 10
    # With outlier channels, per-row scales lose to block scales.
    assert result.rel_error_a > result.rel_error_b


def test_b_matches_a_float64_reference_computed_here():
    import torch

    from labs.quant import quantize

    params = lab.Params(m=8, k=96, n=8, format="int4", granularity=32)
    result, _ = run_lab(lab, params.model_dump())
    a, w = compute._operands(params)
    qa, qw = quantize(a, "int4", granularity=32), quantize(w, "int4", granularity=32)
    deq = qa.dequantize().double() @ qw.dequantize().double().T
    reference = a.double() @ w.double().T
    expected = float(
        torch.linalg.vector_norm(deq - reference) / torch.linalg.vector_norm(reference)
    )
    assert result.rel_error_b == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("granularity", ["tensor", "channel"])
def test_scales_constant_along_k_make_all_placements_equal(granularity):
    result, _ = run_lab(lab, {"granularity": granularity, "m": 16, "k": 256, "n": 16})
    assert result.rel_error_a == result.rel_error_b == result.rel_error_c
    assert all(p.rel_error_vs_dequantized < EXACT for p in result.placements)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "fp8_e4m3"])
def test_float_formats(fmt):
    result, _ = run_lab(lab, {"format": fmt, "m": 16, "k": 200, "n": 16, "outliers": False})
    *_, b, c = result.placements
    assert b.rel_error_vs_dequantized < EXACT and c.rel_error_vs_dequantized > 0.05
    assert result.int16_overflow_k is None and result.asymmetric is None
    if fmt in ("nvfp4", "mxfp4"):
        assert result.rel_error_a is None and result.granularity == f"block {lab.FIXED_BLOCK[fmt]}"


def test_accumulator_width(default_run):
    acc = default_run[0].accumulator
    assert acc.max_product == 127 * 127
    assert acc.int16_max_k == 2 and default_run[0].int16_overflow_k == 3  # 3·16129 > 32767
    assert default_run[0].int32_max_k == (2**31 - 1) // (127 * 127) == 133_144
    assert acc.accumulation_span == 32
    assert acc.observed_max_abs_block_sum <= 32 * acc.max_product
    assert acc.observed_max_abs_sum > 2**15 - 1 and acc.outputs_beyond_int16 > 0
    int4 = run_lab(lab, {"format": "int4", "m": 4, "k": 64, "n": 4})[0]
    assert int4.int16_overflow_k == 32767 // 49 + 1 == 669


def test_zero_points_add_cross_terms(default_run):
    asym = default_run[0].asymmetric
    assert asym is not None and asym.matches_labs_quant
    assert asym.rel_error_all_terms < EXACT
    assert asym.rel_error_main_term_only > 0.5
    assert asym.rel_error_without_constant > asym.rel_error_all_terms
    assert asym.mean_zero_point_w > 0 and all(v > 0 for v in asym.term_norms.values())


@pytest.mark.parametrize(
    "bad",
    [
        {"m": 0},
        {"k": 8193},
        {"n": 513},
        {"m": 512, "n": 512, "k": 8192},
        {"format": "q4_0"},
        {"granularity": 48},
        {"granularity": "row"},
        {"granularity": "48"},
        {"outlier": True},
    ],
)
def test_bad_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        lab.Params.model_validate(bad)


def test_fixed_block_formats_ignore_the_granularity_and_forms_may_send_text():
    assert lab.Params.model_validate({"format": "nvfp4", "granularity": 64}).granularity_used == 16
    assert lab.Params.model_validate({"format": "mxfp4"}).granularity_used == 32
    assert lab.Params.model_validate({"granularity": "64"}).granularity == 64
    assert lab.Params.model_validate({"granularity": "channel"}).granularity_used == "channel"
