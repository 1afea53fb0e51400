"""labs.hardware: the one nvidia-smi reader, NVML and host memory, on any machine."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from labs.hardware import host_memory, nvidia_smi, nvml


def _fake_smi(tmp_path: Path, script: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(tmp_path)


def test_argv_is_fixed_and_names_one_device():
    assert nvidia_smi.argv(("name", "memory.used")) == [
        "nvidia-smi",
        "--query-gpu=name,memory.used",
        "--format=csv,noheader,nounits",
    ]
    assert nvidia_smi.argv(("name",), device="GPU-1")[-1] == "--id=GPU-1"


def test_without_nvidia_smi_the_reply_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    reply = nvidia_smi.query(("name",))
    assert not reply.installed and reply.returncode is None and not reply.ok
    assert reply.error and "not on this PATH" in reply.error
    assert nvidia_smi.query_dicts(("name",)) is None


def test_rows_and_dicts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", _fake_smi(tmp_path, 'printf "A100 , 8.0\\n\\nH100, 9.0\\n"\n'))
    reply = nvidia_smi.query(("name", "compute_cap"))
    assert reply.ok and reply.rows() == [["A100", "8.0"], ["H100", "9.0"]]
    assert nvidia_smi.query_dicts(("name", "compute_cap")) == [
        {"name": "A100", "compute_cap": "8.0"},
        {"name": "H100", "compute_cap": "9.0"},
    ]


def test_a_failing_driver_gives_no_rows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", _fake_smi(tmp_path, 'echo "NVML: driver mismatch" >&2; exit 9\n'))
    reply = nvidia_smi.query(("name",))
    assert reply.returncode == 9 and "mismatch" in reply.stderr
    assert nvidia_smi.query_dicts(("name",)) is None


def test_a_hung_driver_times_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", _fake_smi(tmp_path, "exec /bin/sleep 5\n"))
    monkeypatch.setattr(nvidia_smi, "NVIDIA_SMI_TIMEOUT_S", 0.2)
    reply = nvidia_smi.query(("name",))
    assert reply.returncode is None and "did not answer within 0.2 s" in (reply.error or "")


def test_nvml_without_a_driver_is_none():
    if nvidia_smi.installed():
        pytest.skip("this machine has an NVIDIA driver")
    # Without pynvml, or with it but no driver: None, never an exception.
    assert nvml.utilization_and_used(None) is None


def test_host_memory_reads_this_process():
    rss = host_memory.rss_bytes()
    assert rss is not None and rss > 1 << 20
    peak = host_memory.peak_rss_bytes()
    assert peak is not None and peak >= rss // 2
    assert host_memory.status_bytes("NoSuchField") is None
    host_memory.trim_heap()  # best effort, never raises
