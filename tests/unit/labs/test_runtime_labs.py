"""The three runtime labs, run in-process with a recording context."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from labs import block_quantize, gpu_status, torch_env
from labs.block_quantize import compute as bq_compute
from tests.unit.labs.helpers import run_lab

# -- gpu-status -------------------------------------------------------------------

SMI_OUTPUT = "0, NVIDIA H100 80GB HBM3, 550.54.15, 1024, 81559, 37, 41, 1980, 2619, 1980, 118.52, P0, 9.0\n1, NVIDIA H100 80GB HBM3, 550.54.15, [N/A], 81559, 0, 35, 345, 2619, 1980, [N/A], P8, 9.0\n"


def fake_smi(tmp_path: Path, script: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(tmp_path)


def test_gpu_status_without_a_driver_is_a_finding_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    result, events = run_lab(gpu_status.LAB)
    assert not result.driver_found and result.gpus == []
    assert result.finding.startswith("no NVIDIA driver on this worker")
    assert any("--gpus all" in s for s in result.next_steps)
    assert "Traceback" not in json.dumps([d for _, d in events])


def test_gpu_status_parses_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv_file = tmp_path / "argv"
    monkeypatch.setenv(
        "PATH",
        fake_smi(tmp_path, f'echo "$@" > {argv_file}\ncat <<EOF\n{SMI_OUTPUT}EOF\n')
        + os.pathsep
        + os.environ["PATH"],
    )
    result, events = run_lab(gpu_status.LAB)
    assert result.driver_found and len(result.gpus) == 2
    g0, g1 = result.gpus
    assert (g0.name, g0.driver_version, g0.memory_total_mib, g0.compute_capability) == (
        "NVIDIA H100 80GB HBM3",
        "550.54.15",
        81559.0,
        "9.0",
    )
    assert g1.memory_used_mib is None and g1.power_w is None and g1.pstate == "P8"
    assert "compute capability 9.0" in result.finding
    assert argv_file.read_text().split()[1] == "--format=csv,noheader,nounits"
    table = next(d for k, d in events if k == "table")
    assert table["rows"][0][1] == "NVIDIA H100 80GB HBM3" and len(table["columns"]) == len(
        gpu_status.FIELDS
    )
    assert result.raw.startswith("0, NVIDIA H100")


def test_gpu_status_driver_that_does_not_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    msg = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    monkeypatch.setenv("PATH", fake_smi(tmp_path, f'echo "{msg}"\nexit 9\n'))
    result, _ = run_lab(gpu_status.LAB)
    assert not result.driver_found and "exited with code 9" in result.finding and msg in result.raw


def test_gpu_status_retries_without_compute_cap_on_old_drivers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    old = SMI_OUTPUT.replace(", 9.0\n", "\n")
    script = f'case "$1" in *compute_cap*) echo \'Field "compute_cap" is not a valid field to query.\'; exit 2;; esac\ncat <<EOF\n{old}EOF\n'
    monkeypatch.setenv("PATH", fake_smi(tmp_path, script) + os.pathsep + os.environ["PATH"])
    result, _ = run_lab(gpu_status.LAB)
    assert (
        result.driver_found
        and result.gpus[0].compute_capability is None
        and result.gpus[0].pstate == "P0"
    )


# -- torch-env --------------------------------------------------------------------


def test_torch_env_reports_the_build() -> None:
    import torch

    result, events = run_lab(torch_env.LAB)
    assert result.version_output == torch.__version__
    assert result.version_command == 'python -c "import torch; print(torch.__version__)"'
    assert result.cuda_available == torch.cuda.is_available()
    assert result.device_count == len(result.devices)
    if not result.cuda_available:
        assert "CPU" in result.finding
    assert {k for k, _ in events} >= {"log", "table", "progress"}


@pytest.mark.parametrize(
    ("cc", "arch", "bf16", "fp8", "fp4"),
    [
        ((7, 0), "Volta", False, False, False),
        ((7, 5), "Turing", False, False, False),
        ((8, 6), "Ampere", True, False, False),
        ((8, 9), "Ada Lovelace", True, True, False),
        ((9, 0), "Hopper", True, True, False),
        ((10, 0), "Blackwell", True, True, True),
        ((12, 0), "Blackwell", True, True, True),
        ((6, 1), None, False, False, False),
    ],
)
def test_native_types_follow_the_capability_table(
    cc: tuple[int, int], arch: str | None, bf16: bool, fp8: bool, fp4: bool
) -> None:
    got_arch, types = torch_env.native_types(*cc)
    assert (got_arch or None) == arch or (
        arch and got_arch and got_arch.startswith(arch.split()[0])
    )
    assert torch_env._key_support(types) == {"bf16": bf16, "fp8": fp8, "fp4": fp4}


# -- block-quantize ---------------------------------------------------------------


def test_format_list_matches_labs_quant() -> None:
    from labs.quant import FORMATS

    assert set(block_quantize.FORMAT_KEYS) == set(FORMATS)
    assert len(block_quantize.FORMAT_KEYS) == len(FORMATS)


@pytest.mark.parametrize("fmt", block_quantize.FORMAT_KEYS)
def test_every_format_quantizes_and_the_error_adds_up(fmt: str) -> None:
    from labs.quant import FORMATS

    result, events = run_lab(
        block_quantize.LAB,
        {"format": fmt, "shape": [8, 128], "distribution": "outliers", "seed": 3},
    )
    m = result.metrics
    assert result.numel == 1024 and result.bits_per_value == pytest.approx(8 * result.nbytes / 1024)
    assert result.nominal_bits_per_value == FORMATS[fmt].bits_per_value
    assert m.rounding_mse + m.clipping_mse == pytest.approx(m.mse, rel=1e-9, abs=1e-15)
    assert 0 <= m.clipped <= 1024 and m.rmse == pytest.approx(m.mse**0.5)
    assert m.sqnr_db is None or m.sqnr_db > 0
    blk = result.first_blocks[0]
    assert len(blk.values) == len(blk.codes) == len(blk.dequantized) > 0
    h = result.histograms["values"]
    assert sum(h.counts) + h.below + h.above == 1024  # outliers are counted beside the bins
    plots = [d for k, d in events if k == "plot"]
    hists = [p for p in plots if p["data"].get("kind") == "histogram"]
    assert len(hists) == 2 and all(p["svg"].startswith("<svg") for p in hists)
    assert all(
        p["data"]["counts"] == result.histograms[n].counts
        for p, n in zip(hists, ("values", "errors"))
    )


def test_one_nvfp4_block_of_custom_values() -> None:
    values = [0.0, 0.5, -1.0, 1.5, 2.0, -3.0, 4.0, 6.0, 0.25, -0.75, 1.0, -2.0, 3.0, 5.0, -6.0, 0.1]
    result, events = run_lab(
        block_quantize.LAB, {"format": "nvfp4", "distribution": "custom", "values": values}
    )
    assert result.shape == [1, 16] and result.n_blocks == 1
    blk = result.first_blocks[0]
    assert blk.values == pytest.approx(values) and len(blk.codes) == 16
    # The block's absmax maps to E2M1's largest magnitude (6): its code is 0b0111 or 0b1111.
    assert blk.codes[values.index(-6.0)] & 0b0111 == 0b0111
    assert blk.dequantized[values.index(0.0)] == 0.0
    table = next(d for k, d in events if k == "table")
    assert [r[1] for r in table["rows"]] == pytest.approx(values)


def test_the_largest_tensor_is_allowed_and_one_more_is_not() -> None:
    from pydantic import ValidationError

    assert block_quantize.BlockQuantizeParams(shape=[4096, 4096]).dims == (4096, 4096)
    with pytest.raises(ValidationError, match="cols must be between 1 and 4096"):
        block_quantize.BlockQuantizeParams(shape=[4096, 4097])


def test_histogram_bins_match_histc_and_count_what_lies_beyond() -> None:
    import torch

    from labs.quant.parallel import set_workers

    # Values at bin centres (no rounding at an edge can move them), the range's two
    # ends (the last bin is closed, as histc's), values beyond both ends and NaN.
    lo, hi, bins = -2.0, 2.0, bq_compute.HISTOGRAM_BINS
    width = (hi - lo) / bins
    k = torch.randint(0, bins, (300_001,), generator=torch.Generator().manual_seed(5))
    inside = lo + (k.double() + 0.5) * width
    v = torch.cat(
        [inside, torch.tensor([lo, hi, hi, -7.0, 9.0, 9.5, float("nan")], dtype=torch.float64)]
    ).float()
    expected = torch.histc(v[~v.isnan()], bins=bins, min=lo, max=hi)
    for workers in (None, 2):  # in line, and spread over two threads
        set_workers(workers)
        try:
            counts, below, above = bq_compute._bin_counts(v, lo, hi)
        finally:
            set_workers(None)
        assert counts == [int(c) for c in expected.tolist()]
        assert counts[0] >= 1 and counts[-1] >= 2  # lo and hi (twice) are in the end bins
        assert (below, above) == (1, 2)
        assert sum(counts) + below + above == v.numel() - 1  # NaN is nowhere


def test_relative_rmse_is_rms_error_over_rms_value() -> None:

    result, _ = run_lab(block_quantize.LAB, {"format": "int4", "shape": [16, 256]})
    x = bq_compute._tensor(
        block_quantize.LAB.validate({"format": "int4", "shape": [16, 256]}), "cpu"
    )
    from labs.quant import quantize

    err = quantize(x, "int4").dequantize().double() - x.double()
    expected = (err.pow(2).mean() / x.double().pow(2).mean()).sqrt().item()
    assert result.metrics.relative_rmse == pytest.approx(expected, rel=1e-9)
    zeros, _ = run_lab(
        block_quantize.LAB,
        {"format": "int8", "distribution": "custom", "values": [0.0] * 32, "shape": [1, 32]},
    )
    assert zeros.metrics.relative_rmse is None  # no signal: undefined, not 0 or inf


@pytest.mark.parametrize("shape", [[1, 1], [4, 250], [64, 4096]])
def test_outliers_are_the_stated_fraction_of_distinct_values(shape: list[int]) -> None:
    import torch

    params = block_quantize.LAB.validate(
        {"format": "int8", "shape": shape, "distribution": "outliers", "seed": 9}
    )
    x = bq_compute._tensor(params, "cpu")
    base = torch.randn(*shape, generator=torch.Generator().manual_seed(9))
    scaled = (x != base).sum().item()  # each outlier scaled once, none twice
    n = max(1, round(bq_compute.OUTLIER_FRACTION * x.numel()))
    assert scaled == n
    assert torch.allclose(x[x != base], base[x != base] * bq_compute.OUTLIER_SCALE)
    again = bq_compute._tensor(params, "cpu")
    assert torch.equal(x, again)  # the seed fixes the tensor
