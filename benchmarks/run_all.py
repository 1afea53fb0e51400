"""`make bench`: run every benchmark script; each prints its figures as ratios
against a baseline measured in the same run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "quant.py",
    "pages.py",
    "labs.py",
    "exercises.py",
    "model_labs.py",
    "cost_model.py",
    "load.py",
    "burst.py",
    "fairness.py",
    "fuzz.py",
]


def main() -> int:
    failed = []
    for name in SCRIPTS + sys.argv[1:]:
        print(f"\n=== benchmarks/{name} ===", flush=True)
        started = time.perf_counter()
        rc = subprocess.call([sys.executable, str(HERE / name)], cwd=HERE.parent)
        print(f"--- {name}: exit {rc}, {time.perf_counter() - started:.0f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print("benchmarks that failed to run: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
