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


def test_a_block_quantize_child_imports_nothing_the_warm_parent_did_not() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.unit.labs.runtime._preloaded_child", json.dumps(CASES)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not [name for name in report["failed"] if name.startswith("labs.")], report["failed"]
    for fmt, new in zip(FORMATS, report["new"], strict=True):
        assert new == [], f"{fmt}: the child imported {new}"
