"""CPU time of each model lab's default run (the four labs on lowbit-tiny), in-process.

Each lab runs with its default parameters (``{}``) on one torch thread, as a CPU
worker runs it, after one warm-up run that pays the imports and the file cache.
Printed as a ratio to the 10-second budget a default run should stay within
(ratio ≤ 1 is within budget), with wall time beside it: on a shared machine wall
time varies with load, CPU time much less.

Run: .venv/bin/python benchmarks/model_labs.py [--repeats 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LABS = ("model-quality", "tensor-sensitivity", "quant-algorithms", "kv-quant")
BUDGET_S = 10.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    import torch

    from labs.base import EventContext
    from labs.registry import get_lab

    torch.set_num_threads(1)
    for lab_id in LABS:
        lab = get_lab(lab_id)
        assert lab is not None
        ctx = EventContext(lambda kind, data: None, device="cpu", tmpdir="/tmp")  # noqa: S108
        lab.run(lab.params.model_validate({}), ctx)  # warm-up
        cpu, wall = [], []
        for _ in range(args.repeats):
            c, w = time.process_time(), time.perf_counter()
            lab.run(lab.params.model_validate({}), ctx)
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - w)
        c, w = min(cpu), min(wall)
        print(
            f"{lab_id:20s} default run: {c:6.2f} s CPU ({c / BUDGET_S:.2f} of the "
            f"{BUDGET_S:.0f} s budget), {w:6.2f} s wall"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
