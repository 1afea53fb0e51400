"""Term card throughput vs a static file of the same size, same server, same concurrency.

Prints requests/second for each and their ratio (target: card >= 0.8 of static),
and the web process's resident memory with all content loaded (target < 150 MB).
Run: .venv/bin/python benchmarks/pages.py [--seconds 5] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
SLUG = "block-quantization"


async def _load(url: str, seconds: float, concurrency: int) -> tuple[int, int]:
    done = errors = 0
    deadline = time.perf_counter() + seconds
    async with httpx.AsyncClient(
        timeout=30, limits=httpx.Limits(max_connections=concurrency)
    ) as client:

        async def worker() -> None:
            nonlocal done, errors
            while time.perf_counter() < deadline:
                r = await client.get(url)
                if r.status_code == 200:
                    done += 1
                else:
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, errors


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lowbit-bench-"))
    static = tmp / "static"
    shutil.copytree(ROOT / "static", static)
    port = 8765
    env = {
        **os.environ,
        "LOWBIT_ENV": "test",
        "LOWBIT_DATA_DIR": str(tmp / "data"),
        "LOWBIT_STATIC_DIR": str(static),
        "LOWBIT_PORT": str(port),
    }
    subprocess.run(
        [sys.executable, "-m", "app.cli", "migrate"],
        env=env,
        check=True,
        cwd=ROOT,
        capture_output=True,
    )

    def start() -> subprocess.Popen[bytes]:
        p = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    return p
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    server = start()
    try:
        card = httpx.get(f"http://127.0.0.1:{port}/terms/{SLUG}").content
        server.terminate()
        server.wait()
        (static / "bench-same-size.html").write_bytes(b"x" * len(card))
        server = start()
        base = f"http://127.0.0.1:{port}"
        asyncio.run(_load(f"{base}/terms/{SLUG}", 1.0, args.concurrency))  # warm-up
        card_n, card_err = asyncio.run(
            _load(f"{base}/terms/{SLUG}", args.seconds, args.concurrency)
        )
        static_n, static_err = asyncio.run(
            _load(f"{base}/static/bench-same-size.html", args.seconds, args.concurrency)
        )
        rss_mb = psutil.Process(server.pid).memory_info().rss / 1e6
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    card_rps, static_rps = card_n / args.seconds, static_n / args.seconds
    ratio = card_rps / static_rps if static_rps else float("nan")
    print(
        f"pages: term card {len(card):,} bytes, concurrency {args.concurrency}, {args.seconds:g} s each"
    )
    print(f"  term card      {card_rps:8.1f} req/s  errors {card_err}")
    print(f"  static file    {static_rps:8.1f} req/s  errors {static_err}")
    print(
        f"  ratio card/static = {ratio:.2f}  (target >= 0.80: {'PASS' if ratio >= 0.8 else 'MISS'})"
    )
    print(
        f"  web process RSS  = {rss_mb:.0f} MB  (target < 150 MB: {'PASS' if rss_mb < 150 else 'MISS'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
