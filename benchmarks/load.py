"""Load: simulated learners browse term cards, search and answer quick checks while
lab runs go through the queue, against a real server and workers on 127.0.0.1.

Each learner is an HTTP client with its own session cookie. It loops until the
time is up: open a card at some depth, the index, a search, a lesson, a lab page,
or answer one of the card's quick checks (a real graded POST), with a think time
between actions. At the start, ``--runs`` lab runs are submitted by learners of
their own (two each, the per-learner limit) and polled until they end.

Pass: no request errors (no 5xx, no timeout, no connection error, no unexpected
status) and every run in a final state. Prints p50/p99 latency per kind of
request and run turnaround (created → finished, from the run's own timestamps).

Run: .venv/bin/python benchmarks/load.py [--learners 200] [--runs 50] [--seconds 60]
     [--workers 2] [--stack sqlite|postgres] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.content import Catalogue, QuizItemBase, load_catalogue  # noqa: E402

FINAL = {"succeeded", "failed", "timed_out", "cancelled"}
# Seconds a simulated learner waits between two actions (uniform).
THINK_S = (0.3, 1.5)
# Seconds between polls of a run's status.
RUN_POLL_S = 0.5
REQUEST_TIMEOUT_S = 30.0
KEEPALIVE_S = 2.0
# A run that has not ended this long after the browsing stopped is a failure.
RUN_GRACE_S = 120.0
RUNS_PER_LEARNER = 2  # the default per-learner limit on active runs
# Cheap labs with their default parameters, plus a real quantization.
RUN_MIX: list[tuple[str, dict[str, Any]]] = [
    ("block-quantize", {"format": "nvfp4", "shape": [128, 128]}),
    ("memory-budget", {}),
    ("kv-capacity", {}),
    ("fp8-savings", {}),
    ("torch-env", {}),
]
ACTIONS = {  # kind: weight
    "card": 40,
    "search": 20,
    "quick check": 20,
    "index": 8,
    "lesson": 6,
    "lab page": 6,
}
# Statuses a browsing request may answer with (the rest are errors).
OK_STATUS = {200, 204, 303}


@dataclass
class Report:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0

    def record(self, kind: str, started: float, r: httpx.Response | None, err: str = "") -> None:
        self.latencies[kind].append(time.perf_counter() - started)
        if r is None:
            self.errors.append(f"{kind}: {err}")
        elif r.status_code not in OK_STATUS and not (kind == "run submit" and r.status_code == 202):
            self.errors.append(
                f"{kind}: {r.request.method} {r.request.url.path} -> {r.status_code}"
            )

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    def turnaround(self) -> list[float]:
        return sorted(
            _span(r, "created_at", "finished_at") for r in self.runs.values() if r["finished_at"]
        )

    def queue_wait(self) -> list[float]:
        return sorted(
            _span(r, "created_at", "started_at") for r in self.runs.values() if r["started_at"]
        )

    def summary(self) -> dict[str, Any]:
        kinds = {
            k: {"n": len(v), "p50_ms": _pct(v, 50) * 1e3, "p99_ms": _pct(v, 99) * 1e3}
            for k, v in sorted(self.latencies.items())
        }
        statuses: dict[str, int] = defaultdict(int)
        for r in self.runs.values():
            statuses[r["status"]] += 1
        t, w = self.turnaround(), self.queue_wait()
        return {
            "seconds": round(self.seconds, 1),
            "requests": self.requests,
            "requests_per_s": round(self.requests / max(self.seconds, 1e-9), 1),
            "errors": len(self.errors),
            "latency": kinds,
            "all_p50_ms": _pct([x for v in self.latencies.values() for x in v], 50) * 1e3,
            "all_p99_ms": _pct([x for v in self.latencies.values() for x in v], 99) * 1e3,
            "runs": dict(statuses),
            "runs_final": sum(statuses[s] for s in FINAL),
            "run_turnaround_s": {"p50": _pct(t, 50), "p99": _pct(t, 99), "max": max(t, default=0)},
            "run_queue_wait_s": {"p50": _pct(w, 50), "p99": _pct(w, 99), "max": max(w, default=0)},
        }


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def _span(run: dict[str, Any], a: str, b: str) -> float:
    return (datetime.fromisoformat(run[b]) - datetime.fromisoformat(run[a])).total_seconds()


_SOURCES = itertools.count()


def _source_address() -> str:
    """A loopback address of its own for each simulated learner (127.1.0.1, …), so
    the server's per-client limits see 200 learners, not one client."""
    n = next(_SOURCES)
    return f"127.1.{n // 250}.{n % 250 + 1}"


async def _client(url: str) -> httpx.AsyncClient:
    # Idle connections are dropped before uvicorn's 5 s keep-alive runs out, as a
    # browser or nginx would, so a request never races the server closing its socket.
    limits = httpx.Limits(keepalive_expiry=KEEPALIVE_S)
    transport = httpx.AsyncHTTPTransport(limits=limits, local_address=_source_address())
    c = httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_S, transport=transport)
    r = await c.get("/healthz")
    r.raise_for_status()
    c.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
    return c


async def _send(
    report: Report, c: httpx.AsyncClient, kind: str, method: str, path: str, **kw: Any
) -> httpx.Response | None:
    started = time.perf_counter()
    try:
        r = await c.request(method, path, **kw)
    except httpx.HTTPError as e:
        report.record(kind, started, None, f"{method} {path}: {type(e).__name__}: {e}")
        return None
    report.record(kind, started, r)
    return r


def _answer(item: QuizItemBase, rng: random.Random) -> dict[str, Any]:
    """A well-formed answer: right or wrong, but always gradable."""
    n = len(getattr(item, "choices", None) or [])
    if item.type == "single":
        return {"answer": str(rng.randrange(n))}
    if item.type == "multiple":
        return {"answer": [str(i) for i in sorted(rng.sample(range(n), rng.randint(1, n)))]}
    if item.type == "ordering":
        order = list(range(1, n + 1))
        rng.shuffle(order)
        return {f"order_{i}": str(p) for i, p in enumerate(order)}
    if item.type == "numeric":
        value = float(item.answer) * rng.choice([1, 1, 2])  # type: ignore[arg-type]
        return {"answer": f"{value:g} {item.unit or ''}".strip()}
    return {"answer": "a short answer in my own words"}


async def learner(
    url: str, cat: Catalogue, report: Report, deadline: float, rng: random.Random
) -> None:
    c = await _client(url)
    terms = cat.sorted_terms()
    lessons = cat.sorted_lessons()
    words = [w for t in terms for w in t.title.split() if len(w) > 3] or ["scale"]
    kinds, weights = zip(*ACTIONS.items(), strict=True)
    try:
        await asyncio.sleep(rng.uniform(*THINK_S))  # arrivals spread out
        while time.monotonic() < deadline:
            kind = rng.choices(kinds, weights)[0]
            term = rng.choice(terms)
            if kind == "card":
                await _send(report, c, kind, "GET", f"/terms/{term.slug}?depth={rng.randint(1, 5)}")
            elif kind == "search":
                await _send(report, c, kind, "GET", "/search", params={"q": rng.choice(words)})
            elif kind == "quick check" and term.front.quiz:
                item = rng.choice(term.front.quiz)
                data = {**_answer(item, rng), "csrf_token": c.headers["X-CSRF-Token"]}
                await _send(
                    report, c, kind, "POST", f"/quiz/term:{term.slug}/{item.id}",
                    data=data, headers={"HX-Request": "true"},
                )  # fmt: skip
            elif kind == "index":
                await _send(report, c, kind, "GET", rng.choice(["/terms", "/", "/labs"]))
            elif kind == "lesson" and lessons:
                await _send(report, c, kind, "GET", f"/lessons/{rng.choice(lessons).slug}")
            elif kind == "lab page":
                await _send(report, c, kind, "GET", f"/labs/{rng.choice(RUN_MIX)[0]}")
            await asyncio.sleep(rng.uniform(*THINK_S))
    finally:
        await c.aclose()


async def run_owner(url: str, n: int, report: Report, deadline: float, rng: random.Random) -> None:
    """A learner who starts ``n`` runs at once and polls them until they end."""
    c = await _client(url)
    try:
        ids = []
        for _ in range(n):
            lab, params = rng.choice(RUN_MIX)
            r = await _send(report, c, "run submit", "POST", f"/api/labs/{lab}/runs", json=params)
            if r is not None and r.status_code == 202:
                ids.append(r.json()["id"])
        pending = set(ids)
        while pending and time.monotonic() < deadline + RUN_GRACE_S:
            await asyncio.sleep(RUN_POLL_S)
            for run_id in list(pending):
                r = await _send(report, c, "run status", "GET", f"/api/runs/{run_id}")
                if r is not None and r.status_code == 200:
                    body = r.json()
                    report.runs[run_id] = body
                    if body["status"] in FINAL:
                        pending.discard(run_id)
        for run_id in pending:
            report.errors.append(
                f"run {run_id} did not end ({report.runs.get(run_id, {}).get('status')})"
            )
    finally:
        await c.aclose()


async def drive(
    url: str, content_dir: Path, learners: int, runs: int, seconds: float, seed: int = 1
) -> Report:
    """``learners`` browsing for ``seconds`` while ``runs`` lab runs are queued."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError("the load driver only targets this machine (http://127.0.0.1:PORT)")
    cat = load_catalogue(content_dir)
    report = Report()
    rng = random.Random(seed)
    started = time.perf_counter()
    deadline = time.monotonic() + seconds
    owners = [
        run_owner(
            url, min(RUNS_PER_LEARNER, runs - i), report, deadline, random.Random(rng.random())
        )
        for i in range(0, runs, RUNS_PER_LEARNER)
    ]
    browsing = [
        learner(url, cat, report, deadline, random.Random(rng.random())) for _ in range(learners)
    ]
    await asyncio.gather(*owners, *browsing)
    report.seconds = time.perf_counter() - started
    return report


def print_report(s: dict[str, Any], label: str) -> None:
    print(f"\n{label}: {s['requests']} requests in {s['seconds']} s ({s['requests_per_s']}/s), "
          f"{s['errors']} errors")  # fmt: skip
    print(f"  {'request':<14}{'n':>7}{'p50 ms':>10}{'p99 ms':>10}")
    for kind, v in s["latency"].items():
        print(f"  {kind:<14}{v['n']:>7}{v['p50_ms']:>10.1f}{v['p99_ms']:>10.1f}")
    print(f"  {'all':<14}{s['requests']:>7}{s['all_p50_ms']:>10.1f}{s['all_p99_ms']:>10.1f}")
    t, w = s["run_turnaround_s"], s["run_queue_wait_s"]
    print(f"  runs: {s['runs']} ({s['runs_final']} final)")
    print(f"  run turnaround (created → finished): p50 {t['p50']:.2f} s, p99 {t['p99']:.2f} s, "
          f"max {t['max']:.2f} s; of it queued: p50 {w['p50']:.2f} s, max {w['max']:.2f} s")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", type=int, default=200)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long learners browse")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--stack", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    # The integration suite's stack: server and worker processes, logs in a temp dir.
    from tests.integration.conftest import (
        _postgres_database,
        _redis_database,
        default_stack_env,
        open_stack,
    )

    # Default settings throughout, the per-client limits included.
    env = {**default_stack_env(), "LOWBIT_CONTENT_DIR": str(ROOT / "content")}
    cleanups = []
    if args.stack == "postgres":
        env["LOWBIT_DATABASE_URL"], drop = _postgres_database(f"lowbit_load_{int(time.time())}")
        env["LOWBIT_QUEUE_URL"], flush = _redis_database()
        cleanups += [drop, flush]
    root = Path(tempfile.mkdtemp(prefix="lowbit-load-"))
    try:
        with open_stack(args.stack, root, env, n_workers=args.workers) as stack:
            report = asyncio.run(
                drive(stack.url, ROOT / "content", args.learners, args.runs, args.seconds)
            )
            failures = [
                line for p in (stack.server, *stack.workers) if p is not None
                for line in p.tail(10**8).splitlines() if '"unhandled error"' in line
            ]  # fmt: skip
    finally:
        for c in cleanups:
            c()
    s = report.summary()
    s.update(stack=args.stack, workers=args.workers, learners=args.learners)
    print_report(
        s, f"{args.learners} learners, {args.runs} runs, {args.workers} workers, {args.stack}"
    )
    for e in report.errors[:20]:
        print("  error:", e)
    if failures:
        print(f"  {len(failures)} unhandled errors in the server or worker logs (under {root})")
    if args.json:
        args.json.write_text(json.dumps(s, indent=2))
    ok = not report.errors and not failures and s["runs_final"] == args.runs
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
