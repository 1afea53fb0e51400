"""A small run of the load driver (`benchmarks/load.py`, which `make bench` runs at
full size) on both stacks: learners browse, search and answer quick checks while
lab runs go through the queue; no request fails and every run ends."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.load import drive
from tests.integration.conftest import Stack

LEARNERS = 20
RUNS = 4
SECONDS = 5.0


def test_learners_browse_while_runs_go_through_the_queue(live: Stack) -> None:
    content = Path(live.env["LOWBIT_CONTENT_DIR"])
    # A thread of its own: the browser tests' Playwright may hold this thread's loop.
    with ThreadPoolExecutor(1) as pool:
        report = pool.submit(
            asyncio.run, drive(live.url, content, LEARNERS, RUNS, SECONDS)
        ).result()
    s = report.summary()
    assert report.errors == [], report.errors[:10]
    assert s["runs_final"] == RUNS and s["runs"] == {"succeeded": RUNS}, s["runs"]
    assert {"card", "search", "quick check", "run submit", "run status"} <= set(s["latency"])
    assert s["requests"] >= LEARNERS * 3
