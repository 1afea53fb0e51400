"""`lowbit lab …`: the terminal runner."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.settings import ROOT
from labs.registry import all_labs
from labs.runtime import cli


def test_param_values_are_json_when_they_parse_as_json() -> None:
    assert cli.parse_params(
        ["shape=[256,256]", "format=nvfp4", "seed=3", "values=[1.5, -2]", "x=a=b"]
    ) == {
        "shape": [256, 256],
        "format": "nvfp4",
        "seed": 3,
        "values": [1.5, -2],
        "x": "a=b",
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        cli.parse_params(["shape"])


def test_lab_run_in_a_terminal() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "lab",
            "run",
            "block-quantize",
            "--param",
            "shape=[4,32]",
            "--param",
            "format=q4_0",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout[out.stdout.index("{") :])
    assert (
        result["format"] == "q4_0"
        and result["shape"] == [4, 32]
        and result["bits_per_value"] == 4.5
    )


def test_lab_run_rejects_bad_params_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.lab_run(all_labs(), "block-quantize", ["shape=[0,5]", "format=fp3"]) == 2
    err = capsys.readouterr().err
    assert "shape: " in err and "format: " in err
    assert cli.lab_run(all_labs(), "no-such-lab", []) == 2
    assert cli.lab_list(all_labs()) == 0
    assert "block-quantize" in capsys.readouterr().out


def test_a_model_lab_in_a_terminal_starts_quietly_and_prints_rounded_numbers() -> None:
    # Issue 20 item 12: transformers imported torchao, which logged "Failed to load
    # …_C_mxfp8…" and torch's _pytree Enum warnings on every start; tables and the
    # result printed 17.718452608157502 and cells cut to "0.00139842657…".
    import re

    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "lab", "run", "kv-quant", "--param", "eval_tokens=256"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert re.search(r"\d\.\d{7,}", out.stdout) is None  # nothing past 4 significant digits
    assert "…" not in out.stdout
    assert "KL from the full-precision cache: " in out.stdout and "Top-1 agreement: " in out.stdout
    assert "The int4 cache (per-token) stores 4.5 bits per cached value" in out.stdout
