"""Bursts: 500 simultaneous requests of every kind from one client, on a stack with
default settings (issue 13). Connections are opened first, then every request is
released at once. Prints the status counts, how many 5xx there were (a 429/503
with Retry-After is allowed), /healthz latency measured alongside from a process of
its own (as a ratio to /healthz on the idle server), and how fast a stream over the
learner's limit is refused meanwhile (target: p99 /healthz under 100 ms, refusals
under 1 s).

Run: .venv/bin/python benchmarks/burst.py [--stack sqlite|postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from tests.integration.conftest import (
    _postgres_database,
    _redis_database,
    default_stack_env,
    open_stack,
    setting_default,
    start,
    wait_final,
)
from tests.integration.test_burst import BURST, STREAMS, _burst

ROOT = Path(__file__).resolve().parent.parent


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def _idle_healthz(url: str, n: int = 200) -> list[float]:
    out = []
    async with httpx.AsyncClient(base_url=url) as c:
        for _ in range(n):
            t0 = time.monotonic()
            await c.get("/healthz")
            out.append(time.monotonic() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stack", choices=["sqlite", "postgres"], default="sqlite")
    args = ap.parse_args()
    env = default_stack_env("LOWBIT_EXTRA_LAB_MODULES")  # the probes stay
    cleanups = []
    if args.stack == "postgres":
        env["LOWBIT_DATABASE_URL"], drop = _postgres_database(f"lowbit_burst_{int(time.time())}")
        env["LOWBIT_QUEUE_URL"], flush = _redis_database()
        cleanups += [drop, flush]
    try:
        with open_stack(args.stack, Path(tempfile.mkdtemp(prefix="lowbit-burst-")), env) as s:
            c = s.learner()
            done = start(c, "sandbox-probe", {"mode": "ok"})
            wait_final(c, done)
            slow = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 28})
            kinds = ["/terms/alpha", f"/api/runs/{done}", "/notebook", "/progress",
                     f"/runs/{done}", "/search?q=alpha"]  # fmt: skip
            paths = [f"/api/runs/{slow}/events"] * STREAMS
            paths += [kinds[i % len(kinds)] for i in range(BURST - STREAMS)]
            idle = asyncio.run(_idle_healthz(s.url))
            t0 = time.monotonic()
            cap = int(setting_default("LOWBIT_MAX_STREAMS_PER_LEARNER"))
            tally = asyncio.run(_burst(s.url, c.cookies, paths, f"/api/runs/{slow}/events", cap))
            wall = time.monotonic() - t0
    finally:
        for f in cleanups:
            f()
    codes = Counter(tally.codes)
    fivexx = sum(n for code, n in codes.items() if code >= 500)
    h = tally.healthz_s
    print(f"{args.stack}: {len(tally.codes)} requests ({STREAMS} event streams) in {wall:.1f} s; "
          f"statuses {dict(sorted(codes.items()))}; 5xx {fivexx}; failures {len(tally.bad)}")  # fmt: skip
    print(f"  /healthz during the burst: n={len(h)} p50 {statistics.median(h) * 1000:.1f} ms, "
          f"p99 {_p(h, 0.99) * 1000:.1f} ms, max {max(h) * 1000:.1f} ms; "
          f"p99 / idle p99 = {_p(h, 0.99) / _p(idle, 0.99):.1f}")  # fmt: skip
    refused = [p.seconds for p in tally.refused if p.status == 429]
    if refused:
        print(f"  a stream over the learner's limit during the burst: n={len(refused)} 429s, "
              f"p50 {statistics.median(refused) * 1000:.1f} ms, p99 {_p(refused, 0.99) * 1000:.1f} ms, "
              f"max {max(refused) * 1000:.1f} ms")  # fmt: skip
    for line in tally.bad[:10]:
        print("  bad:", line)
    return 1 if tally.bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
