"""The run-cost model against measurement: each case goes through a real server and
worker (SQLite, default settings) one at a time, and the run's estimate (stored when
it was queued, ``app/runs/cost.py``) is set against the CPU seconds its sandboxed
child used and its wall time. The target: each case's estimate/CPU ratio within
0.5–2 of the median case's, measured in the same invocation (this machine's CPU
seconds for one run vary up to 2x over a day, the median ratio with them: it is
printed, as how far the coefficients in ``app/runs/cost.py``, fitted to this
script's output, are from this hour's machine).

Run: .venv/bin/python benchmarks/cost_model.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Each model lab at its defaults and at a larger size, and the small labs.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("model-quality", {}),
    ("model-quality", {"eval_tokens": 16384, "context": 1024}),
    ("kv-quant", {}),
    ("kv-quant", {"eval_tokens": 16384, "context": 1024}),
    ("tensor-sensitivity", {}),
    ("tensor-sensitivity", {"eval_tokens": 4096, "unit": "tensor"}),
    ("quant-algorithms", {}),
    ("quant-algorithms", {"eval_tokens": 4096, "calibration_tokens": 8192, "act_order": True}),
    ("quant-algorithms", {"methods": ["gptq"], "calibration_tokens": 4096}),
    ("quant-algorithms", {"methods": ["awq"], "calibration_tokens": 4096}),
    ("block-quantize", {"shape": [256, 256]}),
    ("block-quantize", {"shape": [4096, 4096], "format": "q4_0"}),
]
QUICK = [0, 1, 2, 4, 6, 10]


def measure(url: str, lab: str, params: dict[str, Any]) -> dict[str, Any]:
    c = httpx.Client(base_url=url, timeout=30)
    c.get("/healthz").raise_for_status()
    c.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
    r = c.post(f"/api/labs/{lab}/runs", json=params)
    r.raise_for_status()
    run_id = r.json()["id"]
    while True:
        run = c.get(f"/api/runs/{run_id}").json()
        if run["status"] not in ("queued", "running"):
            break
        time.sleep(0.2)
    return {
        "lab": lab,
        "params": params,
        "status": run["status"],
        "estimate_s": run["estimate_s"],
        "cpu_s": run["environment"].get("cpu_seconds"),
        "wall_s": run["duration_s"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a default and a larger case only")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    from tests.integration.conftest import default_stack_env, open_stack

    cases = [CASES[i] for i in QUICK] if args.quick else CASES
    # Default settings but the per-client run limit: every case comes from 127.0.0.1.
    # (The stack's small test content: pages are not what is measured.)
    env = default_stack_env("LOWBIT_ANONYMOUS_RUNS_PER_IP_PER_MINUTE")
    rows = []
    with open_stack("sqlite", Path(tempfile.mkdtemp(prefix="lowbit-cost-")), env) as stack:
        for lab, params in cases:
            row = measure(stack.url, lab, params)
            rows.append(row)
            ratio = row["estimate_s"] / row["cpu_s"] if row["cpu_s"] else float("nan")
            print(
                f"{lab:20} {json.dumps(params):70} estimate {row['estimate_s']:7.2f} s"
                f"  cpu {row['cpu_s'] or 0:7.2f} s  wall {row['wall_s'] or 0:7.2f} s"
                f"  estimate/cpu {ratio:5.2f}  {row['status']}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    ratios = [r["estimate_s"] / r["cpu_s"] for r in rows if r["cpu_s"]]
    typical = statistics.median_high(ratios) if ratios else float("nan")
    bad = [
        r for r in rows if not r["cpu_s"] or not 0.5 <= r["estimate_s"] / r["cpu_s"] / typical <= 2
    ]
    print(f"median estimate/cpu {typical:.2f} (the machine this hour against the fit)")
    print("PASS" if not bad else f"FAIL: {len(bad)} outside 0.5–2 of the median")
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
