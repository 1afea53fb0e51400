"""Schemathesis at full size: every operation of the OpenAPI schema with
``--examples`` generated valid and invalid requests per mode (with generated and
with real path parameters), in process. The same test `make test` runs with
fewer examples (tests/unit/app/test_api_fuzz.py). Pass: no 5xx.

Run: .venv/bin/python benchmarks/fuzz.py [--examples 100]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=100, help="per operation and mode")
    args = ap.parse_args()
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "tests/unit/app/test_api_fuzz.py"],
        cwd=ROOT,
        env={**os.environ, "LOWBIT_FUZZ_EXAMPLES": str(args.examples)},
        capture_output=True,
        text=True,
    )  # fmt: skip
    took = time.perf_counter() - started
    summary = [line for line in out.stdout.splitlines() if line.startswith("schemathesis:")]
    print(*(summary or ["schemathesis: no summary (see the pytest output below)"]), sep="\n")
    print(
        f"{args.examples} examples per operation and mode, {took:.0f} s, pytest exit {out.returncode}"
    )
    if out.returncode:
        print(out.stdout[-6000:])
    return out.returncode


if __name__ == "__main__":
    raise SystemExit(main())
