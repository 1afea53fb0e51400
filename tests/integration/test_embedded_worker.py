"""``lowbit serve --embedded-worker`` (what ``make run`` starts) supervises its one
worker: killed with SIGKILL mid-run, the worker is started again, /readyz and
/metrics say so meanwhile, and the run it held is re-queued and finishes."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from tests.conftest import free_port
from tests.integration.conftest import SERVER, Proc, Stack, open_stack, start, wait_final, wait_for
from tests.integration.test_observability import scrape, value


@pytest.fixture
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with open_stack("embedded", tmp_path_factory.mktemp("embedded"), start=False) as s:
        s.port = free_port()
        s.server = Proc(
            "server", [sys.executable, *SERVER, str(s.port), "--embedded-worker"], s.env, s.log_dir
        )
        s.server.start()
        s.wait_server()
        yield s


def _worker_pid(stack: Stack) -> int | None:
    assert stack.server is not None
    for child in psutil.Process(stack.server.pid).children():
        if "worker" in child.cmdline():
            return child.pid
    return None


def _ready(stack: Stack) -> dict[str, str]:
    return httpx.get(f"{stack.url}/readyz", timeout=10).json()["checks"]


def test_a_killed_embedded_worker_is_restarted_and_its_run_finishes(embedded: Stack) -> None:
    wait_for(lambda: _ready(embedded).get("embedded_worker") == "ok", 60, "no embedded worker")
    c = embedded.learner()
    run_id = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 3})
    wait_for(lambda: embedded.run_row(run_id).status == "running", 60, "the run never started")
    first = _worker_pid(embedded)
    assert first is not None
    psutil.Process(first).kill()
    killed_at = time.monotonic()
    wait_for(lambda: _ready(embedded)["embedded_worker"] != "ok", 10, "death not reported")
    wait_for(lambda: _worker_pid(embedded) not in (None, first), 30, "the worker was not restarted")
    run = wait_final(c, run_id, timeout=90)
    assert run["status"] == "succeeded" and run["attempts"] == 2, run
    print(f"killed worker: run finished {time.monotonic() - killed_at:.1f} s later")
    assert _ready(embedded)["embedded_worker"] == "ok"
    assert value(scrape(embedded.url), "lowbit_embedded_worker_restarts_total") >= 1


def _tree(stack: Stack) -> list[psutil.Process]:
    assert stack.server is not None
    server = psutil.Process(stack.server.pid)
    return [server, *server.children(recursive=True)]


def _slow_run_in_progress(stack: Stack) -> tuple[int, list[psutil.Process]]:
    wait_for(lambda: _ready(stack).get("embedded_worker") == "ok", 60, "no embedded worker")
    run_id = start(stack.learner(), "sandbox-probe-slow", {"mode": "sleep", "seconds": 25})
    wait_for(lambda: stack.run_row(run_id).status == "running", 60, "the run never started")
    # The server, its worker, the worker's fork server and the lab's child at least.
    wait_for(lambda: len(_tree(stack)) >= 4, 30, "the lab's child never started")
    return run_id, _tree(stack)


def test_sigterm_stops_the_whole_tree_within_5_s_and_hands_back_the_run(embedded: Stack) -> None:
    run_id, tree = _slow_run_in_progress(embedded)
    assert embedded.server is not None and embedded.server.proc is not None
    embedded.server.proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    _gone, alive = psutil.wait_procs(tree, timeout=5)
    took = time.monotonic() - sent
    assert not alive, [(p.pid, p.cmdline()) for p in alive]
    print(f"SIGTERM: the whole tree ({len(tree)} processes) was gone in {took:.2f} s")
    row = embedded.run_row(run_id)
    # Re-queued (a later worker runs it again), never left `running`.
    assert row.status == "queued", row.status


def test_a_killed_server_takes_its_worker_down(embedded: Stack) -> None:
    _run_id, tree = _slow_run_in_progress(embedded)
    assert embedded.server is not None
    embedded.server.kill9()
    _gone, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]
