"""Faults with no manual recovery: Redis restarting empty, PostgreSQL restarting
mid-run, the data directory's disk filling up. (kill -9 of a worker and restarts
of the server and worker are in test_durability.py.)

Each fault runs against private services or a private data dir, never the
machine's shared PostgreSQL and Redis. What must hold every time: every run
reaches a final state, learners get a clear answer (a 503 with a message while
something is down, never a 500), and everything works again once the fault is
gone.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bs4 import BeautifulSoup

from app.errors import DATABASE_DOWN_MESSAGE, DISK_FULL_MESSAGE
from tests.integration.conftest import (
    STACK_SETTINGS,
    Stack,
    open_stack,
    start,
    wait_final,
    wait_for,
)
from tests.integration.services import PrivatePostgres, PrivateRedis
from tests.integration.test_observability import scrape, value

# A tmpfs this small fills in a moment, yet holds the migrated database and queue.
DISK_BYTES = 32 * 2**20
FILL_CHUNK = 2**20
# The workers' patience for database writes (LOWBIT_DB_RETRY_SECONDS, 20 s by default):
# shorter here so the long outage below need only outlast it (it slept 30 s), yet long
# enough for the restart test's outage (a stop, 1 s, a start) to be ridden out.
DB_RETRY_S = 8.0


def server_failures(stack: Stack) -> list[dict[str, Any]]:
    """Requests the server answered with a 5xx other than 503, and unhandled errors."""
    assert stack.server is not None
    lines = [json.loads(x) for x in stack.server.tail(10**8).splitlines() if x.startswith("{")]
    return [
        x
        for x in lines
        if (x.get("msg") == "request" and x["status"] >= 500 and x["status"] != 503)
        or x.get("msg") == "unhandled error"
    ]


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Any, Any]]:
    pg, rd = PrivatePostgres(), PrivateRedis()
    try:
        pg.start()
        rd.start()
        env = {
            "LOWBIT_DATABASE_URL": pg.url,
            "LOWBIT_QUEUE_URL": rd.url,
            "LOWBIT_DB_RETRY_SECONDS": str(DB_RETRY_S),
        }
        with open_stack("private", tmp_path_factory.mktemp("faults"), env) as s:
            yield s, pg, rd
    finally:
        rd.close()
        pg.close()


@pytest.mark.postgres
def test_redis_restarting_empty_loses_no_run(private: tuple[Stack, Any, PrivateRedis]) -> None:
    stack, _, redis = private
    stack.ensure_running()
    c, d = stack.learner(), stack.learner()
    busy = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 2})
    wait_for(lambda: stack.run_row(busy).status == "running", 30, "the run never started")
    waiting = start(d, "sandbox-probe", {"mode": "ok"})  # in Redis, behind the busy one
    redis.stop()
    # While Redis is down: the run is accepted and stored; only its message is missing.
    during = start(d, "sandbox-probe", {"mode": "ok"})
    assert d.get(f"/api/runs/{during}").json()["status"] == "queued"
    ready = httpx.get(f"{stack.url}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["checks"]["queue"].startswith("error")
    redis.start()  # empty: the waiting run's message is gone too
    for client, run_id in ((c, busy), (d, waiting), (d, during)):
        assert wait_final(client, run_id, timeout=60)["status"] == "succeeded"
    assert httpx.get(f"{stack.url}/readyz", timeout=10).status_code == 200
    assert stack.worker is not None and stack.worker.alive()
    assert server_failures(stack) == []


@pytest.mark.postgres
def test_postgres_restarting_mid_run_loses_no_run(
    private: tuple[Stack, PrivatePostgres, Any],
) -> None:
    stack, pg, _ = private
    stack.ensure_running()
    c, d = stack.learner(), stack.learner()
    busy = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 3})
    wait_for(lambda: stack.run_row(busy).status == "running", 30, "the run never started")
    waiting = start(d, "sandbox-probe", {"mode": "ok"})
    pg.stop()
    try:
        # The learner's page and the API say what is going on, with a way forward.
        api = c.get(f"/api/runs/{busy}")
        assert api.status_code == 503 and api.json()["detail"] == DATABASE_DOWN_MESSAGE
        assert api.headers["retry-after"].isdigit()
        page = c.get(f"/runs/{busy}", headers={"Accept": "text/html"})
        assert page.status_code == 503
        text = BeautifulSoup(page.text, "html.parser").get_text(" ", strip=True)
        assert "Temporarily unavailable" in text and "try again in a few seconds" in text
        assert c.post("/api/labs/sandbox-probe/runs", json={}).status_code == 503
        assert httpx.get(f"{stack.url}/readyz", timeout=10).status_code == 503
        assert httpx.get(f"{stack.url}/metrics", timeout=10).status_code == 503
        time.sleep(1)  # an outage long enough for the worker's writes to fail
    finally:
        pg.start()
    run = wait_final(c, busy, timeout=60)
    # The worker retried its writes through the outage: no attempt was spent.
    assert run["status"] == "succeeded" and run["attempts"] == 1, run
    assert wait_final(d, waiting, timeout=60)["status"] == "succeeded"
    assert wait_final(d, start(d, "sandbox-probe", {"mode": "ok"}))["status"] == "succeeded"
    assert httpx.get(f"{stack.url}/readyz", timeout=10).status_code == 200
    assert stack.worker is not None and stack.worker.alive()
    assert server_failures(stack) == []


# Longer than the worker's patience for event writes (DB_RETRY_S) plus the reaper's
# grace: before, the run's result went unrecorded and its heartbeat kept it
# "running" for as long as the worker lived. LOWBIT_TEST_OUTAGE_S lengthens it
# (docs/reliability.md records a 60 s outage).
LONG_OUTAGE_S = float(
    os.environ.get(
        "LOWBIT_TEST_OUTAGE_S",
        DB_RETRY_S + float(STACK_SETTINGS["LOWBIT_REAPER_GRACE_SECONDS"]) + 4,
    )
)


@pytest.mark.postgres
def test_a_long_postgres_outage_mid_run_leaves_no_run_running(
    private: tuple[Stack, PrivatePostgres, Any],
) -> None:
    stack, pg, _ = private
    stack.ensure_running()
    c = stack.learner()
    busy = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 2})
    wait_for(lambda: stack.run_row(busy).status == "running", 30, "the run never started")
    pg.stop()
    down_at = time.monotonic()
    try:
        time.sleep(LONG_OUTAGE_S)
    finally:
        pg.start()
    run = wait_final(c, busy, timeout=120)
    ended_after = time.monotonic() - down_at
    assert run["status"] in ("succeeded", "failed"), run
    assert run["status"] == "succeeded" or run["error"], run
    print(f"outage {LONG_OUTAGE_S:.0f} s: run {run['status']} {ended_after:.1f} s after the stop")
    assert stack.worker is not None and stack.worker.alive()
    assert server_failures(stack) == []


def _fill(path: Path) -> None:
    """Write ``path`` until the file system has no byte left."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (FILL_CHUNK, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "disk"
    (root / "data").mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(root / "data")],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(f"mounting a tmpfs needs root (CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root / "data")], check=False)


def test_a_full_disk_answers_503_and_recovers_by_itself(tiny_disk: Path) -> None:
    with open_stack("tiny-disk", tiny_disk) as stack:
        c = stack.learner()
        assert wait_final(c, start(c, "sandbox-probe", {"mode": "ok"}))["status"] == "succeeded"
        busy = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 2})
        wait_for(lambda: stack.run_row(busy).status == "running", 30, "the run never started")
        filler = stack.settings.data_dir / "filler"
        _fill(filler)
        try:
            # Every write now fails at the database: the learner is told why, clearly.
            refused = c.post("/api/labs/sandbox-probe/runs", json={"mode": "ok"})
            assert refused.status_code == 503, refused.text
            assert refused.json()["detail"] == DISK_FULL_MESSAGE
            form = c.post(
                "/labs/sandbox-probe/runs",
                data={"csrf_token": c.headers["X-CSRF-Token"], "mode": "ok"},
                headers={"X-CSRF-Token": "", "Accept": "text/html"},
            )
            assert form.status_code == 503
            assert "storage is full" in BeautifulSoup(form.text, "html.parser").get_text()
            # Reading still works: the running run is visible with its status.
            assert c.get(f"/api/runs/{busy}").json()["status"] in ("running", "succeeded")
            assert value(scrape(stack.url), "lowbit_data_dir_free_bytes") < FILL_CHUNK
            time.sleep(1)  # the busy run's events and result wait for space
        finally:
            filler.unlink()
        # Space is back: the running run ends normally and new runs are accepted.
        assert wait_final(c, busy, timeout=60)["status"] == "succeeded"
        assert wait_final(c, start(c, "sandbox-probe", {"mode": "ok"}))["status"] == "succeeded"
        assert stack.worker is not None and stack.worker.alive()
        assert server_failures(stack) == []
