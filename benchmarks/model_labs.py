"""The model labs' default runs against the 3-second budget, and peak memory against
``eval_tokens``.

Times: each lab runs with its default parameters (``{}``) on lowbit-tiny in-process,
configured as the lab worker configures a run's child on this machine (torch intra-op
threads and chunk workers from ``labs.runtime.sandbox``), after one warm-up run that
pays the imports and the file cache. Printed as a ratio to the 3 s a default run should
stay within on 2 cores (issue 20, "Speed"), with wall and CPU time; wall time is what
a learner waits for, and varies with the load of a shared machine.

Server time (``--server N``): each lab's default run N times through the real server,
queue and one worker process (a fork-server child per run, in its sandbox), the run's own ``duration_s`` (the child, from fork to result) and click → the
stream's end, median and worst; this is the time the 3 s budget is about. With
``--compare DIR`` another checkout (e.g. the commit before a change) is measured the
same way in the same invocation, interleaved lab by lab, so both share the load.
Before and after the runs, a probe says how fast the machine is at that moment: a fresh
process times float32 GEMMs of the shapes the AWQ search runs (on the threads a run's
child gets), and /proc/stat gives the share of CPU time the host took from this machine
(steal) while the runs went, and the first line names the CPU (the development machine
has been an Intel Xeon and an AMD EPYC of half its float32 throughput). The model labs
are bound by those GEMMs, so a slow probe explains a slow hour or a slower host; seconds
measured in different hours or sessions compare only through it.

Memory: ``model-quality`` (q4_0) in a fresh process per ``eval_tokens`` value; the
child's peak RSS should stay flat once the reference log-probabilities reach their
budget (``labs.lm.reference.CACHE_BYTES``), not grow with the text.

Run: .venv/bin/python benchmarks/model_labs.py [--repeats 3] [--server 5 [--compare DIR]]
     [--rss] [--rss-only]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LABS = ("model-quality", "tensor-sensitivity", "quant-algorithms", "kv-quant")
BUDGET_S = 3.0
RSS_TOKENS = (2048, 8192, 16384, 32768, 65536, 111_133)


def configure() -> str:
    """Threads as the worker gives a lone run's child here (the model labs have
    ``wide_ops``: every core as torch threads); returns a description."""
    import torch

    from labs.quant.parallel import set_workers
    from labs.runtime.limits import lab_cpus, lab_threads

    threads = lab_threads(1, wide_ops=True)
    torch.set_num_threads(threads)
    set_workers(max(threads, lab_cpus(1)))
    return f"{threads} torch thread(s), {lab_cpus(1)} chunk worker(s)"


def run_once(lab_id: str, params: dict) -> tuple[float, float]:
    from labs.base import EventContext
    from labs.registry import get_lab

    lab = get_lab(lab_id)
    assert lab is not None
    ctx = EventContext(lambda kind, data: None, device="cpu", tmpdir="/tmp")  # noqa: S108
    c, w = time.process_time(), time.perf_counter()
    lab.run(lab.params.model_validate(params), ctx)
    return time.process_time() - c, time.perf_counter() - w


def times(repeats: int) -> None:
    print(f"default runs ({configure()}), best of {repeats}:")
    for lab_id in LABS:
        run_once(lab_id, {})  # warm-up
        runs = [run_once(lab_id, {}) for _ in range(repeats)]
        cpu, wall = min(r[0] for r in runs), min(r[1] for r in runs)
        print(
            f"  {lab_id:20s} {wall:6.2f} s wall ({wall / BUDGET_S:.2f} of the {BUDGET_S:.0f} s "
            f"budget), {cpu:6.2f} s CPU"
        )


def server_runs(url: str, lab_id: str, n: int) -> list[tuple[float, float]]:
    """(child seconds, click → end seconds) of ``n`` default runs of ``lab_id``."""
    from benchmarks.labs import learner, run_to_end

    c = learner(url)
    out = []
    for _ in range(n):
        run, took = run_to_end(c, lab_id, {})
        out.append((float(run["duration_s"]), took))
    return out


PROBE = """
import time, torch
torch.set_num_threads({threads})
x, g, d = torch.randn(1024, 256), torch.randn(256, 1536), torch.randn(768, 256)
h = torch.randn(1024, 768)
for _ in range(3):
    x @ g, h @ d
best = float("inf")
for _ in range(5):
    t = time.perf_counter()
    for _ in range(10):
        x @ g, h @ d
    best = min(best, time.perf_counter() - t)
print(10 * 2 * (1024 * 256 * 1536 + 1024 * 768 * 256) / best / 1e9)
"""


def probe() -> float:
    """GFLOP/s of float32 GEMMs of the AWQ MLP search's sizes (gate and up as one
    1024×256×1536 product, then down's 1024×768×256), best of 5, in a fresh process with
    the torch threads a lone model-lab run's child gets."""
    from labs.runtime.limits import lab_threads

    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(threads=lab_threads(1, wide_ops=True))],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    return float(out.stdout.split()[-1])


def cpu_name() -> str:
    """The CPU as /proc/cpuinfo names it, with its family and model numbers (a VM may
    give only the vendor's line, e.g. "AMD EPYC"): hosts differ between sessions, and
    their float32 throughput by 2× or more."""
    from labs.quant.cpu import cpuinfo

    fields = cpuinfo()
    return (
        f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family', '?')}, "
        f"model {fields.get('model', '?')}), {os.cpu_count()} cores"
    )


def cpu_ticks() -> tuple[int, int]:
    """(steal, all) CPU ticks since boot, from /proc/stat's first line."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return fields[7], sum(fields[:8])


def server(n: int, compare: Path | None) -> None:
    import statistics
    import tempfile
    from contextlib import ExitStack

    from benchmarks.labs import base_env, migrate, stack

    trees = {"this checkout": ROOT, **({f"{compare}": compare} if compare else {})}
    print(f"default runs through the server (one worker), {n} each:")
    with ExitStack() as stacks:
        urls = {}
        for name, root in trees.items():
            env = base_env(Path(stacks.enter_context(tempfile.TemporaryDirectory())))
            migrate(env, root)
            urls[name] = stacks.enter_context(stack(env, 1, root))
        for url in urls.values():  # warm-up: the first run of a worker pays its set-up
            server_runs(url, "kv-quant", 1)
        before, ticks = probe(), cpu_ticks()
        print(
            f"  machine probe: {before:.0f} GFLOP/s (float32 GEMMs as AWQ's search runs) "
            f"on {cpu_name()}"
        )
        for lab_id in LABS:
            for name, url in urls.items():
                got = server_runs(url, lab_id, n)
                child = [g[0] for g in got]
                click = [g[1] for g in got]
                med = statistics.median(child)
                print(
                    f"  {lab_id:20s} {name}: child {med:5.2f} s median, {max(child):5.2f} worst "
                    f"({med / BUDGET_S:.2f} of the {BUDGET_S:.0f} s budget); click → end "
                    f"{statistics.median(click):5.2f} s"
                )
        steal, total = (now - then for now, then in zip(cpu_ticks(), ticks, strict=True))
        print(
            f"  machine probe: {probe():.0f} GFLOP/s after the runs; the host took "
            f"{steal / max(total, 1):.1%} of this machine's CPU time while they ran (steal)"
        )


def rss_child(eval_tokens: int) -> None:
    """In a fresh process: one model-quality run; prints its peak RSS as JSON."""
    configure()
    params = {"format": "q4_0", "eval_tokens": eval_tokens, "context": 256}
    try:
        _, wall = run_once("model-quality", params)
    except ValueError as e:  # refused by validation (the old cap)
        print(json.dumps({"refused": str(e).splitlines()[0][:120]}))
        return
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak_rss_mib": peak / 2**20, "seconds": wall}))


def rss_curve() -> None:
    print("model-quality (q4_0, context 256): peak RSS of a fresh process by eval_tokens")
    for n in RSS_TOKENS:
        out = subprocess.run(
            [sys.executable, __file__, "--rss-child", str(n)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        got = json.loads(lines[-1]) if lines else {"error": out.stderr.strip()[-200:]}
        if "peak_rss_mib" in got:
            print(f"  {n:7d} tokens: {got['peak_rss_mib']:7.0f} MiB peak, {got['seconds']:6.1f} s")
        else:
            print(f"  {n:7d} tokens: {got}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--server", type=int, default=0, help="runs per lab through the server")
    ap.add_argument("--compare", type=Path, help="another checkout, measured alongside")
    ap.add_argument("--rss", action="store_true", help="also the peak-RSS curve (minutes)")
    ap.add_argument("--rss-only", action="store_true")
    ap.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child:
        rss_child(args.rss_child)
        return 0
    if args.server:
        server(args.server, args.compare)
    elif not args.rss_only:
        times(args.repeats)
    if args.rss or args.rss_only:
        rss_curve()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
