"""Routing, queue positions, /metrics and logs after real runs, on both stacks.

The PostgreSQL + Redis stack runs two worker processes; the SQLite stack one.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
from bs4 import BeautifulSoup
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import (
    Stack,
    read_sse,
    setting_default,
    start,
    wait_final,
    wait_for,
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    r = httpx.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (n, labels) in samples if n == name]


def account(stack: Stack) -> httpx.Client:
    """A signed-in learner (GPU labs need an account)."""
    c = stack.learner()
    name = "gpu" + secrets.token_hex(4)
    pw = "correct horse " + secrets.token_hex(4)
    r = c.post(
        "/signup",
        data={
            "username": name,
            "password": pw,
            "password2": pw,
            "csrf_token": c.headers["X-CSRF-Token"],
        },
    )
    assert r.status_code == 303, r.text
    return c


def test_every_worker_takes_runs_one_at_a_time(live: Stack) -> None:
    """Two long runs at once: with two workers both run side by side, each on its own
    worker; with one worker the second waits for the first. (Long: a worker's short-lane
    slot would take a short one beside the other, test_fairness.py.)"""
    c = live.learner()
    seconds = float(setting_default("LOWBIT_SHORT_RUN_SECONDS"))
    ids = [start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": seconds}) for _ in range(2)]
    if live.n_workers >= 2:
        wait_for(
            lambda: all(live.run_row(i).status == "running" for i in ids),
            30,
            "the two runs never ran at the same time",
        )
        owners = {live.run_row(i).worker_id for i in ids}
        assert len(owners) == 2, owners
        pids = {int(w.split(":")[1]) for w in owners}
        assert pids == {p.pid for p in live.workers if p is not None}
    runs = [wait_final(c, i) for i in ids]
    assert [r["status"] for r in runs] == ["succeeded", "succeeded"]
    if live.n_workers == 1:
        first, second = sorted(runs, key=lambda r: r["started_at"])
        assert second["started_at"] >= first["finished_at"]  # never two at once


def test_the_compose_gpu_worker_without_a_gpu_serves_cpu_and_leaves_gpu_runs_queued(
    live: Stack,
) -> None:
    """compose.yaml's worker-gpu (queues gpu,cpu) started where no GPU is usable (a
    missing driver, a failed device reservation): it must not take GPU runs it cannot
    run; it says why, advertises only the cpu queue and serves that."""
    import sys

    from sqlalchemy import select

    from app.db import Worker
    from tests.integration.conftest import WORKER, Proc

    live.stop_workers()
    env = {**live.env, "LOWBIT_WORKER_QUEUES": "gpu,cpu"}
    proc = Proc("worker-gpu", [sys.executable, *WORKER], env, live.log_dir)
    proc.start()
    try:
        live.wait_worker(proc)
        with live.factory() as s:
            row = s.scalars(select(Worker).where(Worker.pid == proc.pid)).one()
            assert row.queues == "cpu" and not row.capabilities.get("gpu_count")
        assert "will not take the gpu queue" in proc.tail()
        learner = account(live)
        gpu_run = start(learner, "sandbox-probe-gpu-only", {"mode": "ok"})
        cpu_run = start(learner, "sandbox-probe", {"mode": "ok"})
        assert wait_final(learner, cpu_run)["status"] == "succeeded"
        assert live.run_row(cpu_run).worker_id.split(":")[1] == str(proc.pid)
        waiting = learner.get(f"/api/runs/{gpu_run}").json()
        assert (waiting["status"], waiting["queue"], waiting["queue_position"]) == (
            "queued",
            "gpu",
            1,
        )
        assert learner.post(f"/api/runs/{gpu_run}/cancel").json()["status"] == "cancelled"
    finally:
        proc.stop()


def test_a_gpu_lab_waits_for_a_gpu_worker_with_its_queue_position(live: Stack) -> None:
    """No worker here has a GPU: a lab that requires one stays queued on the gpu queue,
    shows its place, is never taken by a CPU worker and never lost."""
    alice, bob = account(live), account(live)
    first = start(alice, "sandbox-probe-gpu-only", {"mode": "ok"})
    second = start(bob, "sandbox-probe-gpu-only", {"mode": "ok"})
    # CPU runs submitted after them are served meanwhile: the workers are busy, just not
    # with the gpu queue.
    cpu = start(bob, "sandbox-probe", {"mode": "ok"})
    assert wait_final(bob, cpu)["status"] == "succeeded"
    a, b = alice.get(f"/api/runs/{first}").json(), bob.get(f"/api/runs/{second}").json()
    assert (a["status"], a["queue"], b["status"], b["queue"]) == ("queued", "gpu", "queued", "gpu")
    assert (a["queue_position"], b["queue_position"]) == (1, 2)
    assert wait_final(bob, cpu)["queue_position"] is None  # only queued runs have a place
    assert {first, second} <= live.queue.pending_ids("gpu")  # still in the queue: not lost
    page = BeautifulSoup(bob.get(f"/runs/{second}").text, "html.parser")
    place = page.select_one(f"#run-{second}-status .queue-position")
    assert place is not None and place["data-position"] == "2"
    text = place.get_text(" ", strip=True)
    assert "2nd in the GPU queue" in text and "no GPU worker is running" in text, text
    metrics = scrape(live.url)
    assert value(metrics, "lowbit_queue_depth", queue="gpu") == 2
    # The first one leaves the queue: the second moves up, in the API and in the status
    # panel its page's event stream sends (the stream is the page's one live channel).
    assert alice.post(f"/api/runs/{first}/cancel").json()["status"] == "cancelled"
    assert bob.get(f"/api/runs/{second}").json()["queue_position"] == 1
    events = read_sse(bob, f"/runs/{second}/stream", until=lambda kind, _: kind == "status")
    moved = BeautifulSoup(events[-1][2], "html.parser").select_one(".queue-position")
    assert moved is not None and moved["data-position"] == "1"
    api = read_sse(bob, f"/api/runs/{second}/events", until=lambda kind, _: kind == "status")
    # No GPU worker is up: no wait to promise.
    assert api[-1][2] == {"status": "queued", "queue_position": 1, "queue_wait": ""}
    assert bob.post(f"/api/runs/{second}/cancel").json()["status"] == "cancelled"
    assert value(scrape(live.url), "lowbit_queue_depth", queue="gpu") == 0


def test_metrics_and_logs_after_real_runs_and_sandbox_kills(live: Stack) -> None:
    before = scrape(live.url)
    c, d = live.learner(), live.learner()
    rid = "req-" + secrets.token_hex(6)
    ok = c.post("/api/labs/sandbox-probe/runs", json={"mode": "ok"}, headers={"X-Request-ID": rid})
    assert ok.status_code == 202 and ok.headers["x-request-id"] == rid
    ok_id = ok.json()["id"]
    spin = start(c, "sandbox-probe", {"mode": "spin"})  # killed at its 2 s time limit
    hog = start(d, "sandbox-probe", {"mode": "memory"})  # refused by its memory limit
    ends = {i: wait_final(x, i)["status"] for x, i in ((c, ok_id), (c, spin), (d, hog))}
    assert ends == {ok_id: "succeeded", spin: "timed_out", hog: "failed"}
    after = scrape(live.url)

    def grew(name: str, by: float = 1, **labels: str) -> None:
        delta = value(after, name, **labels) - value(before, name, **labels)
        assert delta >= by, (name, labels, delta)

    lab = "sandbox-probe"
    grew("lowbit_runs", lab=lab, status="succeeded")
    grew("lowbit_runs", lab=lab, status="timed_out")
    grew("lowbit_runs", lab=lab, status="failed")
    grew("lowbit_run_duration_seconds_count", by=3, lab=lab)
    assert value(after, "lowbit_run_duration_seconds_bucket", lab=lab, le="+Inf") == value(
        after, "lowbit_run_duration_seconds_count", lab=lab
    )
    grew("lowbit_sandbox_kills_total", reason="time")
    grew("lowbit_sandbox_kills_total", reason="memory")
    assert {s["reason"] for s in series(after, "lowbit_sandbox_kills_total")} >= {
        "time",
        "memory",
        "output",
        "crash",
    }
    assert {s["queue"] for s in series(after, "lowbit_queue_depth")} >= {"cpu", "gpu"}
    # Every running worker of this stack heartbeats, and recently.
    up = [s for s in series(after, "lowbit_worker_heartbeat_age_seconds") if s["status"] == "up"]
    assert len(up) >= live.n_workers
    for s in up:
        assert value(after, "lowbit_worker_heartbeat_age_seconds", **s) < 5, s
    grew(
        "lowbit_http_request_duration_seconds_count",
        method="POST",
        route="/api/labs/{lab_id}/runs",
        status="202",
    )
    assert (
        value(
            after,
            "lowbit_http_request_duration_seconds_count",
            method="GET",
            route="/api/runs/{run_id}",
            status="200",
        )
        > 0
    )
    if live.name == "sqlite":
        assert value(after, "lowbit_data_dir_free_bytes") > 0

    # JSON logs: the server's access line carries the request id, the worker's lines
    # the run id (one of the workers ran each run).
    assert live.server is not None
    access = [x for x in _json_lines(live.server.tail(10**7)) if x.get("msg") == "request"]
    mine = [x for x in access if x.get("request_id") == rid]
    assert mine and mine[0]["route"] == "/api/labs/{lab_id}/runs" and mine[0]["status"] == 202
    worker_lines = [x for p in live.workers if p is not None for x in _json_lines(p.tail(10**7))]
    for run_id, status in ends.items():
        said = {x["msg"]: x for x in worker_lines if x.get("run") == run_id}
        assert {"run started", "run finished"} <= set(said), (run_id, said)
        assert said["run finished"]["status"] == status
    assert (
        next(x for x in worker_lines if x.get("run") == spin and x["msg"] == "run finished")[
            "end_reason"
        ]
        == "time"
    )


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_worker_check_is_healthy_only_while_a_worker_on_this_host_heartbeats(
    live: Stack,
) -> None:
    """`lowbit worker --check`, the worker images' HEALTHCHECK."""
    import os
    import subprocess
    import sys

    from app.settings import ROOT
    from tests.integration.conftest import WORKER

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *WORKER, "--check"],
            cwd=ROOT,
            env={**os.environ, **live.env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    healthy = check()
    assert (healthy.returncode, healthy.stderr.strip()) == (0, "worker healthy")
    live.stop_workers()  # each marks itself stopped
    gone = check()
    assert (gone.returncode, gone.stderr.strip()) == (1, "no live worker on this host")
