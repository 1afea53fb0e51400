"""Nothing a learner started is lost or stuck: kill -9 of the worker mid-run, restarts
of the server and the worker, and a queue that lost its messages."""

from __future__ import annotations

import time

from tests.integration.conftest import Stack, start, wait_final, wait_for


def test_kill9_of_the_worker_mid_run_requeues_the_run_once(live: Stack) -> None:
    c = live.learner()
    run_id = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 3})
    wait_for(
        lambda: c.get(f"/api/runs/{run_id}").json()["status"] == "running",
        30,
        "the run never started",
    )
    victim = live.worker_of(run_id)  # with two workers, either may have it
    pid = victim.pid
    victim.kill9()
    killed_at = time.monotonic()
    # The lab child dies with its worker (parent-death signal), not orphaned.
    row = live.run_row(run_id)
    assert row.status == "running" and row.worker_id.split(":")[1] == str(pid)
    live.ensure_running()
    run = wait_final(c, run_id, timeout=60)
    took = time.monotonic() - killed_at
    assert run["status"] == "succeeded", run
    assert run["attempts"] == 2
    notices = [e["data"] for e in run["events"] if e["kind"] == "notice"]
    assert any(n["code"] == "worker_lost" for n in notices), notices
    # Bounded: the reaper grace (3 s) + a reaper period + the 3 s lab, with start-up slack.
    assert took < 45, took


def test_queued_runs_survive_restarts_and_a_queue_that_lost_them(live: Stack) -> None:
    c, other = live.learner(), live.learner()
    live.stop_workers(first=1)  # one worker, so nothing takes the run it hands back
    assert live.worker is not None and live.server is not None
    # A worker stopped with two signals stops its running lab and queues it again.
    busy = start(other, "sandbox-probe-slow", {"mode": "sleep", "seconds": 2})
    wait_for(lambda: live.run_row(busy).status == "running", 30, "the run never started")
    live.worker.stop(signals=2)
    assert live.run_row(busy).status == "queued"
    assert busy in live.queue.pending_ids("cpu")
    lost = start(c, "sandbox-probe", {"mode": "ok"})
    live.queue.flush()  # the queue forgets it (e.g. Redis restarted without persistence)
    kept = start(c, "sandbox-probe", {"mode": "ok"})
    assert live.queue.pending_ids("cpu") == {kept}  # busy and lost are gone from the queue
    live.server.stop()
    live.start_server()
    live.start_worker()
    assert wait_final(c, kept, timeout=60)["status"] == "succeeded"
    # The reaper finds the lost one in the database and enqueues it again.
    assert wait_final(c, lost, timeout=60)["status"] == "succeeded"
    assert wait_final(other, busy, timeout=60)["status"] == "succeeded"
