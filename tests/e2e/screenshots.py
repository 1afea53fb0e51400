"""`make screenshots`: every page type at desktop (1366×900) and phone (390×844) size.

Starts the server and an embedded worker the way `make run` does (``lowbit serve
--embedded-worker``, on a throw-away data directory and a free port), drives Debian's
Chromium over the pages in ``PAGES`` plus one finished lab run (and, unless
``--pages-only``, each model lab's run, a lesson's three runs, compare and shared), and writes
``docs/screenshots/<size>-<page>.png`` (full-page shots; git ignores them).

The page list is shared with the browser test that asserts zero console errors on
every page type (tests/e2e/test_console_browser.py), so what a reviewer looks at is
what the suite checks.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, sync_playwright

from app.settings import ROOT
from tests.conftest import CHROMIUM, CHROMIUM_FLAGS, free_port

SIZES = {"desktop": (1366, 900), "phone": (390, 844)}
OUT = ROOT / "docs" / "screenshots"
START_TIMEOUT_S = 90.0
RUN_TIMEOUT_MS = 120_000
# (name, path): one of each page type a learner meets; the run page is added by run_lab().
PAGES = [
    ("home", "/"),
    ("terms", "/terms"),
    *[(f"term-depth-{d}", f"/terms/fp8?depth={d}") for d in range(1, 6)],
    ("term-map", "/terms/quantization#map"),
    ("collection", "/collections/numerics-and-formats"),
    ("lessons", "/lessons"),
    ("lesson", "/lessons/one-block-by-hand"),
    ("labs", "/labs"),
    ("lab", "/labs/block-quantize"),
    ("exercises", "/exercises"),
    ("exercise", "/exercises/q8_0-quantize"),
    ("search", "/search?q=scale"),
    ("goto", "/goto?q=nv"),
    ("progress", "/progress"),
    ("review", "/review"),
    ("notebook", "/notebook"),
    ("signin", "/signin"),
]
RUN_LAB = "memory-budget"  # finishes in well under a second on a CPU worker
# The run views issue 20 asks to look at: each model lab's run page at its defaults,
# a lesson whose three embedded labs are run in order, a compare page, a shared run.
MODEL_LABS = ("model-quality", "tensor-sensitivity", "quant-algorithms", "kv-quant")
LESSON_WITH_RUNS = "kv-cache-quantization"  # three embedded labs, model labs among them
COMPARE = ({"format": "q4_k"}, {"format": "q6_k"})  # block-quantize, same tensor


def run_lab(
    page: Page, base_url: str, lab: str = RUN_LAB, params: dict[str, str] | None = None
) -> str:
    """Start ``lab`` from its page (its form prefilled with ``params``, else its
    defaults) and wait until it ends; the run's URL."""
    query = "&".join(f"{k}={v}" for k, v in (params or {}).items())
    page.goto(f"{base_url}/labs/{lab}" + (f"?{query}" if query else ""))
    page.locator("#lab-form button[type=submit]").click()
    page.locator(".run-status .status.succeeded").wait_for(timeout=RUN_TIMEOUT_MS)
    page.wait_for_url("**/runs/**")
    return page.url


def run_lesson(page: Page, base_url: str, slug: str = LESSON_WITH_RUNS) -> None:
    """Predict and run each embedded lab of lesson ``slug`` in order, as a learner does."""
    page.goto(f"{base_url}/lessons/{slug}")
    embeds = page.locator(".lab-embed")
    for i in range(embeds.count()):
        embed = embeds.nth(i)
        prefix = str(embed.get_attribute("id")) + "-"
        embed.locator(f"#{prefix}pred").fill(f"my guess for step {i + 1}")
        embed.locator("form.lab-form button[type=submit]").click()
        embed.locator(".lab-out section.run[data-status=succeeded]").wait_for(
            timeout=RUN_TIMEOUT_MS
        )


def share(page: Page, base_url: str, run_path: str) -> str:
    """Make a share link for the run at ``run_path``; the shared page's path."""
    page.goto(base_url + run_path)
    page.locator(".share-box button[type=submit]").click()
    link = page.locator(".share-box input.share-link")
    link.wait_for()
    return "/shared/" + str(link.input_value()).split("/shared/", 1)[1]


def run_views(page: Page, base_url: str) -> list[tuple[str, str]]:
    """(name, path) of the run views: the model labs, compare, shared."""
    views = [
        (f"run-{lab}", run_lab(page, base_url, lab).removeprefix(base_url)) for lab in MODEL_LABS
    ]
    a, b = (run_lab(page, base_url, "block-quantize", p).removeprefix(base_url) for p in COMPARE)
    ids = [path.rsplit("/", 1)[1] for path in (a, b)]
    views.append(("compare", f"/runs/compare?a={ids[0]}&b={ids[1]}"))
    views.append(("shared", share(page, base_url, a)))
    return views


def shoot(base_url: str, out: Path = OUT, runs: bool = True) -> list[Path]:
    """Screenshot every page in ``PAGES`` and one finished run at each size, and with
    ``runs`` the model labs' runs, a lesson's runs, compare and shared; the files."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        try:
            for size, (w, h) in SIZES.items():
                ctx = browser.new_context(viewport={"width": w, "height": h})
                page = ctx.new_page()
                # a run is its learner's own: each size's browser context runs its own
                run_path = run_lab(page, base_url).removeprefix(base_url)
                pages = [*PAGES, ("run", run_path)]
                if runs:
                    pages += run_views(page, base_url)
                for name, path in pages:
                    page.goto(base_url + path, wait_until="networkidle")
                    path_png = out / f"{size}-{name}.png"
                    page.screenshot(path=str(path_png), full_page="#" not in path)
                    written.append(path_png)
                if runs:  # the lesson's panels live in the page: shot where they ran
                    run_lesson(page, base_url)
                    path_png = out / f"{size}-lesson-runs.png"
                    page.screenshot(path=str(path_png), full_page=True)
                    written.append(path_png)
                ctx.close()
        finally:
            browser.close()
    return written


def serve(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    """``lowbit migrate`` then ``lowbit serve --embedded-worker``, as `make run` does."""
    env = {
        **os.environ,
        "LOWBIT_DATA_DIR": str(data_dir),
        "LOWBIT_PORT": str(port),
        "PYTHONPATH": str(ROOT),
        # One client starts ~20 runs in a few minutes here; a learner's limit is 10 a minute.
        "LOWBIT_ANONYMOUS_RUNS_PER_IP_PER_MINUTE": "1000",
    }
    cli = [sys.executable, "-m", "app.cli"]
    subprocess.run([*cli, "migrate"], cwd=ROOT, env=env, check=True, capture_output=True)
    log = open(data_dir / "server.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [*cli, "serve", "--port", str(port), "--embedded-worker"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server did not answer {url}/healthz in {START_TIMEOUT_S:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="screenshot a server that is already running here")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--pages-only", action="store_true", help="skip the model labs, lesson, compare, shared"
    )
    args = parser.parse_args()
    if args.url:
        files = shoot(args.url.rstrip("/"), args.out, not args.pages_only)
    else:
        with tempfile.TemporaryDirectory(prefix="lowbit-shots-") as tmp:
            data_dir = Path(tmp) / "data"
            data_dir.mkdir()
            port = free_port()
            proc = serve(data_dir, port)
            try:
                wait_ready(f"http://127.0.0.1:{port}", proc)
                files = shoot(f"http://127.0.0.1:{port}", args.out, not args.pages_only)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    print(f"{len(files)} screenshots in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
