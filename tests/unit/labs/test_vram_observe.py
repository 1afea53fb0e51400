"""vram-observe: CPU runs measure RSS and say so; the OOM search; a real CUDA run."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from pydantic import ValidationError

from labs import vram_observe as vo
from tests.unit.labs.helpers import run_lab

TINY = {"hidden_size": 128, "seq_len": 16, "batch_sizes": [1, 4], "dtypes": ["bf16"]}


def test_bad_params_are_rejected_and_batches_normalised():
    with pytest.raises(ValidationError, match="multiple of 64"):
        vo.Params.model_validate({"hidden_size": 100})
    with pytest.raises(ValidationError, match="between 1 and"):
        vo.Params.model_validate({"batch_sizes": [0, 2]})
    with pytest.raises(ValidationError, match="at most once"):
        vo.Params.model_validate({"dtypes": ["bf16", "bf16"]})
    with pytest.raises(ValidationError, match="dtypes"):
        vo.Params.model_validate({"dtypes": ["int8"]})
    with pytest.raises(ValidationError):
        vo.Params.model_validate({"memory_cap_mb": 1})
    assert vo.Params.model_validate({"batch_sizes": [8, 2, 8]}).batch_sizes == [2, 8]


def test_weights_estimate_is_parameters_times_bytes():
    p = vo.Params()
    h, layers = p.hidden_size, p.layers
    assert vo.weights_estimate(p, "fp32") == 12 * h * h * layers * 4
    assert vo.weights_estimate(p, "bf16") == 12 * h * h * layers * 2
    chain = vo.Params(workload="matmul-chain", hidden_size=256, layers=3)
    assert vo.weights_estimate(chain, "fp16") == 256 * 256 * 3 * 2


def test_cpu_run_measures_rss_and_says_it_is_not_vram(tmp_path):
    result, events = run_lab(vo, tmpdir=tmp_path)
    assert result.device == "cpu"
    assert "RSS" in result.measured and "not VRAM" in result.measured
    assert any("not GPU memory" in n for n in result.notes)
    p = vo.Params()
    assert len(result.measurements) == len(p.batch_sizes) * len(p.dtypes)
    assert all(m.ok and m.rss_peak_bytes and m.allocated_bytes is None for m in result.measurements)
    fp32, bf16 = result.summaries
    assert fp32.weights_estimate_bytes == 2 * bf16.weights_estimate_bytes
    # RSS is coarse, but the weights' pages are all touched: within 8 MiB of the estimate.
    for s in result.summaries:
        assert abs(s.weights_measured_bytes - s.weights_estimate_bytes) < 8 * vo.MIB, s
        assert s.largest_fit_batch is None and s.oom_search == "not searched on a CPU"
    assert result.largest_batch is None and result.cuda_context_mib is None
    assert result.activation_mib_per_sequence and result.activation_mib_per_sequence > 0
    kinds = {kind for kind, _ in events}
    assert {"progress", "table", "metric", "plot", "log"} <= kinds
    assert events[-1] == ("progress", {"fraction": 1.0, "message": "done"})
    titles = [d["title"] for k, d in events if k == "table"]
    assert "Measurements on CPU (process RSS, not VRAM)" in titles


def test_a_cuda_request_without_cuda_runs_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result, _ = run_lab(vo, {**TINY, "workload": "matmul-chain"}, device="cuda", tmpdir=tmp_path)
    assert result.device == "cpu" and "not VRAM" in result.measured
    assert [m.batch for m in result.measurements] == [1, 4]


def test_fit_line_recovers_slope_and_intercept():
    assert vo.fit_line([(1, 110), (2, 120), (4, 140)]) == pytest.approx((100.0, 10.0))
    assert vo.fit_line([(2, 5), (2, 7)]) is None


class FakeProbe:
    """Runs out of memory above ``limit`` sequences, like a capped allocator."""

    dtype_name = "bf16"

    def __init__(self, limit: int):
        self.limit = limit
        self.tried: list[int] = []

    def try_measure(self, batch: int, timed: bool = False):
        self.tried.append(batch)
        if batch > self.limit:
            return None, "CUDA out of memory. Tried to allocate 2.00 MiB."
        return vo.oom_row("bf16", batch).model_copy(update={"ok": True, "peak_bytes": batch}), None


@pytest.mark.parametrize("limit", [1, 37, 1000, 5000])
def test_oom_search_doubles_then_bisects(limit):
    probe = FakeProbe(limit)
    far = float("inf")
    got = vo.search_oom(probe, 8 if limit >= 8 else None, None if limit >= 8 else 8, 4096, far)
    if limit >= 4096:
        assert got.first_oom is None and got.largest_fit == 4096 and "no OOM" in got.how
        return
    if limit < 8:  # even the first requested batch failed: the bisection goes below it
        assert got.largest_fit == limit
    assert got.largest_fit is not None and got.first_oom is not None
    assert got.largest_fit <= limit < got.first_oom
    assert got.first_oom - got.largest_fit <= max(1, got.largest_fit * vo.OOM_BISECT_RESOLUTION)
    assert got.message and "out of memory" in got.message
    assert max(probe.tried) <= 4096
    assert [r.ok for r in got.rows] == [b <= limit for b in probe.tried]


def test_oom_search_stops_at_its_deadline():
    probe = FakeProbe(10**6)
    got = vo.search_oom(probe, 1, None, 10**6, deadline=0.0)
    assert probe.tried == [] and got.first_oom is None and "time budget" in got.how


def test_cpu_activations_that_fall_with_the_batch_are_not_shown() -> None:
    """Defect 11: on a CPU, bf16 RSS "activations" fell as the batch grew; such a series
    is flagged, no per-sequence figure is derived from it, and the result says up front
    what a CPU run can and cannot measure."""
    from types import SimpleNamespace

    from labs.vram_observe import headline

    def rows(peaks: list[int]) -> list[Any]:
        return [
            SimpleNamespace(ok=True, batch=b, activation_peak_bytes=p * vo.MIB)
            for b, p in zip((1, 4, 16), peaks, strict=True)
        ]

    assert vo.rss_grows_with_batch(rows([10, 40, 160]))
    assert not vo.rss_grows_with_batch(rows([60, 30, 12]))  # falls: misleading
    assert not vo.rss_grows_with_batch(rows([20, 20, 20]))  # flat: nothing measured
    result, events = run_lab(vo, TINY)
    stored = result.model_dump(mode="json")
    assert result.finding and "cannot show VRAM" in result.finding
    tiles = headline(stored)
    assert tiles[0].label == "Measured" and tiles[0].tone == "warn"
    table = next(d for k, d in events if k == "table" and d["title"].startswith("Measurements"))
    for s in result.summaries:
        shown = [row[4] for row in table["rows"] if row[0] == s.dtype]
        if not s.activations_measured:
            assert s.activation_bytes_per_sequence is None and s.projected_max_batch is None
            assert set(shown) == {"not measurable on a CPU"}
            assert s.dtype in result.finding
        else:
            assert all(isinstance(v, float | int) for v in shown)
