"""granularity-compare, run through EventContext as the worker runs it."""

from __future__ import annotations

import subprocess
import sys
from typing import get_args

import pytest
from pydantic import ValidationError

from labs import granularity_compare as lab
from labs.quant.metrics import ErrorSummary
from tests.unit.labs.helpers import run_lab


@pytest.fixture(scope="module")
def default_run():
    return run_lab(lab)


def test_formats_are_exactly_those_with_a_granularity_option():
    from labs.quant import FORMATS

    granular = {k for k, f in FORMATS.items() if "granularity" in f.option_names()}
    assert set(get_args(lab.GranularFormatKey)) == granular


def test_default_run_outliers_per_block_beats_per_tensor(default_run):
    result, events = default_run
    kinds = {kind for kind, _ in events}
    assert {"progress", "log", "table", "metric", "plot"} <= kinds
    assert events[-1] == ("progress", {"fraction": 1.0, "message": "done"})
    rows = {r.granularity: r for r in result.rows}
    assert list(rows) == ["tensor", "channel", "block 16", "block 32", "block 64", "block 128"]
    # An outlier in a scale group coarsens only that group: finer groups, higher SQNR.
    sqnr = [
        rows[g].error.sqnr_db for g in ("tensor", "block 128", "block 64", "block 32", "block 16")
    ]
    assert sqnr == sorted(sqnr)
    assert rows["block 32"].error.sqnr_db > rows["tensor"].error.sqnr_db + 10
    assert result.best_by_sqnr == "block 16"
    assert result.sqnr_gain_db_block_32 == pytest.approx(
        rows["block 32"].error.sqnr_db - rows["tensor"].error.sqnr_db
    )


def test_bytes_and_bits_are_the_scale_arithmetic(default_run):
    result, _ = default_run
    rows_, cols = result.shape
    numel = rows_ * cols
    fp32_bytes, int4_bits = 4, 4
    for r in result.rows:
        expected_scales = {"tensor": 1, "channel": rows_}.get(r.granularity)
        if expected_scales is None:
            expected_scales = numel // int(r.granularity.split()[1])
        assert r.n_scales == expected_scales
        assert r.scale_overhead_bytes == fp32_bytes * expected_scales
        assert r.nbytes == numel * int4_bits // 8 + r.scale_overhead_bytes
        assert r.bits_per_value == pytest.approx(8 * r.nbytes / numel)
    assert result.bits_per_value_block_32 == 4 + 32 / 32
    assert result.scale_overhead_bytes_block_32 == numel // 32 * fp32_bytes


def test_absmax_scales_never_clip_so_the_error_is_all_rounding(default_run):
    result, _ = default_run
    for r in result.rows:
        assert r.error.clipped == 0
        assert r.error.clipping_mse == 0
        assert r.error.rounding_mse == pytest.approx(r.error.mse)


def test_matches_labs_quant_metrics():
    import torch

    from labs.quant import quantize
    from labs.quant.metrics import error_report

    result, _ = run_lab(lab, {"format": "fp8_e4m3", "shape": [16, 256], "distribution": "laplace"})
    x = lab.make_tensor(16, 256, "laplace", 0)
    for r, g in zip(result.rows, lab.GRANULARITIES, strict=True):
        report = error_report(x, quantize(x, "fp8_e4m3", granularity=g))
        assert r.error.mse == pytest.approx(report.mse, rel=1e-9)
        assert r.error.clipped == report.clipped_count
        assert r.error.clipping_mse == report.clipping_mse
        assert r.error.sqnr_db == pytest.approx(report.sqnr_db, rel=1e-9)
        assert r.scale_overhead_bytes == report.scale_overhead_bytes
        assert r.bits_per_value == pytest.approx(report.bits_per_value)
    assert torch.equal(x, lab.make_tensor(16, 256, "laplace", 0))  # seeded


def test_error_split_counts_real_clipping_and_ignores_ulp_noise():
    import torch

    from labs.quant.metrics import clipped_beyond, error_split

    def split_error(x, deq, lo, hi):
        # How the labs split error against a range of their own (scale-derivation).
        return ErrorSummary.of(error_split(x, deq, clipped_beyond(x, lo, hi)))

    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    deq = torch.tensor([1.0, 2.0, 3.0, 3.0])  # 4 clipped to 3
    lo, hi = torch.full((4,), -3.0), torch.full((4,), 3.0)
    split = split_error(x, deq, lo, hi)
    assert split.clipped == 1 and split.clipping_mse == pytest.approx(1 / 4)
    assert split.rounding_mse == 0
    # A bound a float32 ulp below the value is scale rounding, not clipping.
    hi_ulp = torch.full((4,), torch.nextafter(torch.tensor(4.0), torch.tensor(0.0)).item())
    assert split_error(x, x, -hi_ulp, hi_ulp).clipped == 0


def test_normal_int4_blocks_clip_nothing():
    # int4 block 16 used to flag hundreds of values clipped by a float32 ulp.
    result, events = run_lab(lab, {"distribution": "normal"})
    assert all(r.error.clipped == 0 and r.error.clipping_mse == 0 for r in result.rows)
    logs = [d["text"] for kind, d in events if kind == "log"]
    assert any(text.startswith("No value was clipped") for text in logs)


def test_the_log_counts_a_single_outlier():
    # 0.0001 of 64 values rounds to one outlier, which a percentage alone shows as 0.00 %.
    _, events = run_lab(lab, {"shape": [4, 16], "outlier_fraction": 0.0001})
    first = next(d["text"] for kind, d in events if kind == "log")
    assert "(1 outlier, 1.56% of values, ×50)" in first
    x = lab.make_tensor(4, 16, "outliers", 0, outlier_fraction=0.0001)
    plain = lab.make_tensor(4, 16, "normal", 0)
    assert int((x != plain).sum()) == lab.outlier_count(64, 0.0001) == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"shape": [2048, 4096]},
        {"shape": [1024, 8192]},
        {"shape": [0, 16]},
        {"shape": [16]},
        {"format": "nvfp4"},
        {"format": "int2"},
        {"distribution": "cauchy"},
        {"outlier_scale": 0.5},
        {"outlier_fraction": 0.5},
        {"seed": -1},
        {"colour": "red"},
    ],
)
def test_bad_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        lab.Params.model_validate(bad)


def test_importing_the_labs_imports_no_numeric_stack():
    code = (
        "import sys, labs.granularity_compare, labs.scale_derivation, labs.dot_product_scales; "
        "bad = {'torch', 'numpy', 'matplotlib'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
