"""reproducibility: two runs bitwise equal, fp32 vs int8/fp8 agreement, the record."""

from __future__ import annotations

import sys

import pytest
import torch
from pydantic import ValidationError

from labs import reproducibility as rp
from labs.reproducibility import compute as rp_compute
from tests.unit.labs.helpers import run_lab

SMALL = {"batch": 64, "hidden": 64, "in_features": 32}


def test_bad_params_are_rejected():
    with pytest.raises(ValidationError, match="outside the batch"):
        rp.Params.model_validate({"batch": 8, "test_case": 8})
    with pytest.raises(ValidationError, match="low_precision"):
        rp.Params.model_validate({"low_precision": "int4"})
    with pytest.raises(ValidationError):
        rp.Params.model_validate({"batch": 1})
    with pytest.raises(ValidationError):
        rp.Params.model_validate({"sede": 1})


def test_empty_params_two_runs_equal_and_int8_agrees(tmp_path):
    was = torch.are_deterministic_algorithms_enabled()
    result, events = run_lab(rp, tmpdir=tmp_path)
    assert torch.are_deterministic_algorithms_enabled() == was  # restored after the run
    assert result.runs_bitwise_equal and result.runs_max_abs_diff == 0.0
    assert result.environment.torch == torch.__version__
    assert result.environment.device == "cpu" and result.environment.deterministic_algorithms
    assert result.input_shape == [256, 64] and result.seed == 0
    assert result.int8_top1_agreement is not None and result.int8_top1_agreement >= 0.95
    assert result.fp8_top1_agreement is not None and result.fp8_top1_agreement >= 0.9
    int8, fp8 = result.comparisons
    assert (int8.format, fp8.format) == ("int8", "fp8")
    # Per-channel int8 keeps 7 bits below each row's max; E4M3 has 3 mantissa bits.
    assert 0 < int8.weight_rel_error < fp8.weight_rel_error
    assert 0 < int8.max_abs_diff and not int8.bitwise_equal
    kinds = {kind for kind, _ in events}
    assert {"progress", "table", "metric", "plot", "log"} <= kinds
    assert any("Two runs from seed 0: bitwise equal" in d["text"] for k, d in events if k == "log")
    assert events[-1] == ("progress", {"fraction": 1.0, "message": "done"})


def test_fingerprint_depends_on_the_seed_only(tmp_path):
    a, _ = run_lab(rp, {**SMALL, "low_precision": "fp8"}, tmpdir=tmp_path)
    b, _ = run_lab(rp, {**SMALL, "low_precision": "fp8", "deterministic": False}, tmpdir=tmp_path)
    c, _ = run_lab(rp, {**SMALL, "low_precision": "fp8", "seed": 1}, tmpdir=tmp_path)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert len(a.fingerprint) == rp.FINGERPRINT_HEX_CHARS
    assert a.int8_top1_agreement is None and a.fp8_top1_agreement is not None


def test_int8_falls_back_to_the_inline_quantizer_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "labs.quant", None)  # makes `import labs.quant` fail
    result, events = run_lab(rp, {**SMALL, "low_precision": "int8"}, tmpdir=tmp_path)
    assert result.comparisons[0].quantizer == "inline"
    assert any("labs.quant is not importable" in d["text"] for k, d in events if k == "log")


def test_inline_int8_matches_labs_quant_per_channel():
    from labs.quant import quantize

    w = torch.randn(128, 64, generator=torch.Generator().manual_seed(3))
    library = quantize(w, "int8", granularity="channel").dequantize()
    assert torch.allclose(rp_compute.int8_per_channel(w), library, atol=1e-7, rtol=0)


def test_fp8_clamps_before_the_cast():
    w = torch.randn(16, 16, generator=torch.Generator().manual_seed(4))
    w[0, 0] = 1e4
    q = rp_compute.fp8_per_tensor(w)
    assert bool(torch.isfinite(q).all())
    assert float(q[0, 0]) == pytest.approx(1e4, rel=1e-6)  # amax maps to exactly 448 × scale
    assert float(rp_compute.fp8_per_tensor(torch.zeros(4, 4)).abs().max()) == 0.0


def test_out_of_range_fp8_depends_on_the_path_as_the_docstring_says():
    # The docstring of fp8_per_tensor describes these two CPU paths; if torch changes
    # them, this fails and the docstring needs a new look.
    e4m3 = torch.float8_e4m3fn
    assert torch.full((4,), 1000.0).to(e4m3).float().tolist() == [448.0] * 4  # saturates
    with pytest.raises(RuntimeError, match="overflow"):
        torch.full((4,), 1000.0, dtype=e4m3)  # the scalar conversion refuses
    assert "depends on the code path" in " ".join((rp_compute.fp8_per_tensor.__doc__ or "").split())


def test_the_test_case_is_reported(tmp_path):
    result, events = run_lab(
        rp, {**SMALL, "test_case": 5, "low_precision": "int8"}, tmpdir=tmp_path
    )
    assert result.test_case == 5
    table = next(d for k, d in events if k == "table" and d["title"].startswith("Test case 5"))
    assert len(table["rows"]) == 10 and table["columns"] == ["class", "fp32", "int8", "difference"]
    # The fp32 column is the model's output for that input, recomputed here.
    w, x = rp_compute.build(rp.Params.model_validate({**SMALL, "test_case": 5}), "cpu")
    with torch.no_grad():
        expected = rp_compute.forward(w, x[5:6])[0]
    assert [row[1] for row in table["rows"]] == pytest.approx(expected.tolist(), abs=1e-5)
