"""A lab child keeps freed memory for its next tensor (``sandbox.keep_freed_memory``):
glibc would otherwise map each block over 128 KiB afresh and page-fault it in again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
BLOCK = 16 * 2**20  # a [1024, 4096] float32 logits tensor
ROUNDS = 10
GROWTH = 64 * 2**10  # glibc raises its threshold to a freed block's size: outgrow it

CHILD = f"""
import json, resource, sys
from labs.runtime.sandbox import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "kept" else None
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range({ROUNDS}):  # each a little larger, as tensors of a growing batch
    b = bytearray({BLOCK} + i * {GROWTH})  # zero-filled: every page touched
    del b
print(json.dumps({{"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}}))
"""


def _faults(mode: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return dict(json.loads(out.stdout))


def test_a_freed_tensor_s_pages_are_reused_not_faulted_in_again() -> None:
    pages = BLOCK // 4096
    plain, kept = _faults("plain"), _faults("kept")
    assert kept["kept"] is True
    assert int(plain["faults"]) >= ROUNDS * pages * 0.9  # type: ignore[call-overload]
    assert int(kept["faults"]) <= 2 * pages  # type: ignore[call-overload]
