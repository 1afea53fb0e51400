"""Fairness: do small runs wait behind a learner who keeps the worker busy?

Against a real server and one worker with the default settings (one run at a time,
plus the short-lane slot where the code has one), on SQLite + SqliteHuey or on
PostgreSQL + Redis:

- quiet: ten learners each start a 256×256 ``block-quantize`` at once;
- busy: one learner first queues two long model-lab runs (by default the largest
  ``quant-algorithms`` run the form accepts) and waits until one runs; then the ten
  start theirs.

Prints the small runs' POST → end (the client's clock at the POST to the run's
``finished_at``, one machine) p50 / p95 in both, and busy p95 ÷ quiet p95 (target
≤ 2). A small run not finished within ``--timeout`` counts as the timeout (so the
figure is a lower bound) and is reported. Then the long runs are cancelled.

Run: .venv/bin/python benchmarks/fairness.py [--stack sqlite|postgres]
     [--long '{"calibration_tokens": 8192}'] [--timeout 900] [--json FILE]
To measure older code, point LOWBIT_CODE_ROOT and PYTHONPATH at its checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(os.environ.get("LOWBIT_CODE_ROOT") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(ROOT))

SMALL_LAB, SMALL = "block-quantize", {"shape": [256, 256], "format": "nvfp4", "seed": 1}
LONG_LAB = "quant-algorithms"
# The largest quant-algorithms run the form accepts for the shipped model: every
# held-out and calibration token it has (labs/lm/lowbit-tiny), the longest window.
MAXIMAL = {
    "eval_tokens": 111_133,
    "calibration_tokens": 55_298,
    "context": 2048,
    "act_order": True,
}
LEARNERS = 10
POLL_S = 0.2


async def _learner(url: str) -> httpx.AsyncClient:
    c = httpx.AsyncClient(base_url=url, timeout=60)
    (await c.get("/healthz")).raise_for_status()
    c.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
    return c


async def _small_run(c: httpx.AsyncClient, timeout: float) -> tuple[float, bool]:
    """Seconds from the POST to the run's end; (timeout, False) if it did not end."""
    posted = datetime.now(UTC)
    r = await c.post(f"/api/labs/{SMALL_LAB}/runs", json=SMALL)
    r.raise_for_status()
    run_id = r.json()["id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = (await c.get(f"/api/runs/{run_id}")).json()
        if run["finished_at"]:
            assert run["status"] == "succeeded", run["error"]
            return (datetime.fromisoformat(run["finished_at"]) - posted).total_seconds(), True
        await asyncio.sleep(POLL_S)
    await c.post(f"/api/runs/{run_id}/cancel")
    return timeout, False


async def _wave(url: str, timeout: float) -> list[tuple[float, bool]]:
    clients = [await _learner(url) for _ in range(LEARNERS)]
    try:
        return list(await asyncio.gather(*(_small_run(c, timeout) for c in clients)))
    finally:
        for c in clients:
            await c.aclose()


async def _busy(url: str, long_params: dict[str, Any], timeout: float) -> list[tuple[float, bool]]:
    hog = await _learner(url)
    ids = []
    for _ in range(2):
        r = await hog.post(f"/api/labs/{LONG_LAB}/runs", json=long_params)
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    try:
        while (await hog.get(f"/api/runs/{ids[0]}")).json()["status"] == "queued":
            await asyncio.sleep(POLL_S)
        return await _wave(url, timeout)
    finally:
        for run_id in ids:
            await hog.post(f"/api/runs/{run_id}/cancel")
        await hog.aclose()


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def _figures(wave: list[tuple[float, bool]]) -> dict[str, Any]:
    seconds = [s for s, _ in wave]
    return {
        "p50_s": round(_pct(seconds, 50), 2),
        "p95_s": round(_pct(seconds, 95), 2),
        "unfinished": sum(1 for _, done in wave if not done),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--long", type=json.loads, default=MAXIMAL, help="the long runs' params")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds a small run may take")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    from tests.integration.conftest import (
        _postgres_database,
        _redis_database,
        default_stack_env,
        open_stack,
    )

    # Default settings, but the per-client run limit: every learner is on 127.0.0.1.
    # (The stack's small test content: pages are not what is measured.)
    env = default_stack_env("LOWBIT_ANONYMOUS_RUNS_PER_IP_PER_MINUTE")
    cleanups = []
    if args.stack == "postgres":
        env["LOWBIT_DATABASE_URL"], drop = _postgres_database(f"lowbit_fair_{int(time.time())}")
        env["LOWBIT_QUEUE_URL"], flush = _redis_database()
        cleanups += [drop, flush]
    root = Path(tempfile.mkdtemp(prefix="lowbit-fairness-"))
    try:
        with open_stack(args.stack, root, env, n_workers=1) as stack:
            asyncio.run(_wave(stack.url, args.timeout))  # warm: first runs pay for start-up
            quiet = _figures(asyncio.run(_wave(stack.url, args.timeout)))
            busy = _figures(asyncio.run(_busy(stack.url, args.long, args.timeout)))
    finally:
        for c in cleanups:
            c()
    ratio = busy["p95_s"] / quiet["p95_s"] if quiet["p95_s"] else float("inf")
    out = {"stack": args.stack, "long": args.long, "quiet": quiet, "busy": busy, "ratio": ratio}
    print(f"fairness, {args.stack}: {LEARNERS} small runs ({SMALL_LAB} 256×256), POST → end")
    print(f"  quiet                       p50 {quiet['p50_s']:7.2f} s  p95 {quiet['p95_s']:7.2f} s")
    print(
        f"  behind 2 long {LONG_LAB} runs p50 {busy['p50_s']:7.2f} s  p95 {busy['p95_s']:7.2f} s"
        + (f"  ({busy['unfinished']} not done in {args.timeout:g} s)" if busy["unfinished"] else "")
    )
    print(f"  busy p95 / quiet p95 = {ratio:.2f} (target <= 2)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
