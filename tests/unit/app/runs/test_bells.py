"""Bells (app.runs.bells): a stream reads a run's news when the worker rings, a worker
reads the queue when the web rings, instead of at their next poll (issue 20)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.db import make_engine, make_sessionmaker
from app.runs import claims, live
from app.runs.bells import STREAMS, WORKERS, Bell, Ringer, RunNews, bells_dir
from app.runs.queue import RunQueue
from app.settings import Settings
from tests.conftest import LiveServer

# Far longer than any test waits: a stream that ends must have been woken by its bell.
NO_POLL_S = 600.0
GUARD_S = 60.0  # how long the test waits before calling the stream stuck


def test_a_ring_reaches_every_bell_of_its_role_only(tmp_path: Path) -> None:
    streams = [Bell(tmp_path, STREAMS), Bell(tmp_path, STREAMS)]
    worker = Bell(tmp_path, WORKERS)
    try:
        Ringer(tmp_path, STREAMS).ring("run-1")
        assert [b.drain() for b in streams] == [["run-1"], ["run-1"]]
        assert worker.drain() == []
    finally:
        for b in (*streams, worker):
            b.close()
    assert os.listdir(bells_dir(tmp_path)) == []  # a closed bell removes its socket


def test_the_socket_of_a_process_that_is_gone_is_removed_by_the_next_ring(
    tmp_path: Path,
) -> None:
    gone = Bell(tmp_path, STREAMS)
    gone.sock.close()  # died without closing: its socket file stays
    assert os.listdir(bells_dir(tmp_path)) == [gone.path.name]
    Ringer(tmp_path, STREAMS).ring("run-1")
    assert os.listdir(bells_dir(tmp_path)) == []


def test_ringing_where_no_bell_was_ever_bound_does_nothing(tmp_path: Path) -> None:
    Ringer(tmp_path / "nowhere", STREAMS).ring("run-1")
    assert not (tmp_path / "nowhere").exists()


def test_queueing_a_run_rings_the_workers_bell(migrated: Settings) -> None:
    bell = Bell(migrated.data_dir, WORKERS)
    try:
        RunQueue(migrated).enqueue("run-7", "cpu")
        assert bell.drain() == ["run-7"]
    finally:
        bell.close()


def test_run_news_sets_the_watchers_of_the_rung_run_only(tmp_path: Path) -> None:
    async def main() -> tuple[bool, bool]:
        news = RunNews(tmp_path)
        news.start()
        try:
            with news.watch("a") as a, news.watch("b") as b:
                Ringer(tmp_path, STREAMS).ring("a")
                await asyncio.wait_for(a.wait(), GUARD_S)
                return a.is_set(), b.is_set()
        finally:
            news.stop()

    # In a thread of its own: after the browser tests, Playwright's sync API leaves an
    # event loop running in this one, where asyncio.run refuses to start.
    got: list[tuple[bool, bool]] = []
    t = threading.Thread(target=lambda: got.append(asyncio.run(main())))
    t.start()
    t.join(GUARD_S * 2)
    assert got == [(True, False)]


@pytest.fixture
def server(migrated: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    # The stream polls once, then would sleep for ten minutes: only a ring wakes it.
    monkeypatch.setattr(live, "SSE_POLL_MIN_S", NO_POLL_S)
    monkeypatch.setattr(live, "SSE_POLL_MAX_S", NO_POLL_S)
    with LiveServer(migrated) as s:
        yield s


def test_a_stream_sends_end_when_the_worker_rings_not_at_its_next_poll(
    server: LiveServer, migrated: Settings
) -> None:
    c = httpx.Client(base_url=server.url, timeout=GUARD_S)
    c.get("/healthz")
    c.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
    run_id = c.post("/api/labs/sandbox-probe/runs", json={}).json()["id"]
    factory = make_sessionmaker(make_engine(migrated.db_url))
    kinds: list[str] = []

    def worker() -> None:  # what LabWorker does around a run, without the lab
        assert claims.claim(factory, run_id, "w1") is not None
        assert claims.append_events(factory, run_id, "w1", [("log", {"text": "hi"})])
        assert claims.finish(factory, run_id, "w1", claims.Ending("succeeded", result={}))
        Ringer(migrated.data_dir, STREAMS).ring(run_id)

    thread: threading.Thread | None = None
    with c.stream("GET", f"/api/runs/{run_id}/events") as s:
        for line in s.iter_lines():
            if line.startswith("event: "):
                kinds.append(line.removeprefix("event: "))
            if kinds == ["status"] and thread is None:  # queued, and the stream asleep
                thread = threading.Thread(target=worker)
                thread.start()
            if kinds[-1:] == ["end"]:
                break
    assert thread is not None
    thread.join()
    factory.kw["bind"].dispose()
    assert kinds == ["status", "log", "status", "end"]
