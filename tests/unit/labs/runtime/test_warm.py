"""The warm parent imports what a run needs, so no child pays for an import (issue 20:
the format classes, loaded lazily by labs.quant, cost every small run 0.1 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
FORMATS = ("nvfp4", "mxfp4", "q4_k", "int4", "nf4", "fp8_e4m3")
CASES = [["block-quantize", {"format": fmt, "shape": [32, 64]}] for fmt in FORMATS]
# The model labs, small: what a child pays before its first weight is loaded.
MODEL_CASES = [
    ["model-quality", {"eval_tokens": 256}],
    ["quant-algorithms", {"eval_tokens": 256, "calibration_tokens": 256}],
    ["tensor-sensitivity", {"eval_tokens": 256}],
    ["kv-quant", {"eval_tokens": 256}],
]
# A first from_pretrained compiles ~950 regular expressions (transformers' table of
# checkpoint renamings, 0.18 s) unless the parent built it; ~50 remain per load.
MAX_REGEXES = 100


def _children(cases: list[list[object]]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.unit.labs.runtime._preloaded_child", json.dumps(cases)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["failed"] == {}, report["failed"]
    return dict(report)


def test_a_block_quantize_child_imports_nothing_the_warm_parent_did_not() -> None:
    report = _children(CASES)
    for fmt, new in zip(FORMATS, report["new"], strict=True):  # type: ignore[call-overload]
        assert new["modules"] == [], f"{fmt}: the child imported {new['modules']}"


def test_a_model_lab_child_imports_nothing_and_loads_without_building_tables() -> None:
    report = _children(MODEL_CASES)
    for (lab, _), new in zip(MODEL_CASES, report["new"], strict=True):  # type: ignore[call-overload]
        assert new["modules"] == [], f"{lab}: the child imported {new['modules']}"
        assert new["regexes"] < MAX_REGEXES, f"{lab}: the child compiled {new['regexes']}"
