"""Run records against a real (SQLite) database and queue: claim, events, quotas,
cancel, and the reaper. The same code runs on PostgreSQL in the integration suite."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from app.db import Learner, Run, make_engine, make_sessionmaker, utcnow
from app.runs import claims, store
from app.runs.queue import RunQueue
from app.settings import Settings
from labs.runtime.probe import PROBES

PROBE = PROBES[0]


@pytest.fixture
def env(migrated: Settings) -> Any:
    factory = make_sessionmaker(make_engine(migrated.db_url))
    with factory() as s:
        s.add_all([Learner(id="alice"), Learner(id="bob")])
        s.commit()

    class Env:
        settings = migrated
        queue = RunQueue(migrated)

        def submit(self, learner: str = "alice", settings: Settings | None = None) -> Run:
            with factory() as s:
                return store.submit(
                    s, settings or migrated, self.queue, learner, PROBE, PROBE.params()
                )

    e = Env()
    e.factory = factory  # type: ignore[attr-defined]
    yield e
    factory.kw["bind"].dispose()


def test_a_run_is_claimed_once(env: Any) -> None:
    run = env.submit()
    assert env.queue.dequeue(["cpu-short", "cpu"]) == ("cpu-short", run.id)  # a short run
    assert claims.claim(env.factory, run.id, "w1").status == "running"
    assert claims.claim(env.factory, run.id, "w2") is None  # a duplicate message is skipped
    with env.factory() as s:
        assert store.cancel_run(s, run.id, "bob") is None  # not bob's


def test_events_are_numbered_and_only_the_owner_may_write(env: Any) -> None:
    run = env.submit()
    claims.claim(env.factory, run.id, "w1")
    assert claims.append_events(
        env.factory, run.id, "w1", [("log", {"text": "a"}), ("log", {"text": "b"})]
    )
    assert claims.append_events(env.factory, run.id, "w1", [("metric", {"value": 1})])
    assert not claims.append_events(env.factory, run.id, "w2", [("log", {"text": "intruder"})])
    with env.factory() as s:
        assert [(e.seq, e.kind) for e in store.events_after(s, run.id)] == [
            (1, "log"),
            (2, "log"),
            (3, "metric"),
        ]
        assert [e.seq for e in store.events_after(s, run.id, 2)] == [3]
    assert claims.finish(
        env.factory, run.id, "w1", claims.Ending("succeeded", result={"ok": True}, duration_s=0.1)
    )
    assert not claims.finish(env.factory, run.id, "w1", claims.Ending("failed"))  # ended once


def test_quotas_active_and_daily(env: Any) -> None:
    env.submit()
    env.submit()
    with pytest.raises(store.RunRefused) as e:
        env.submit()
    assert e.value.status == 429 and "limit is 2" in e.value.message
    env.submit("bob")  # quotas are per learner
    daily = env.settings.model_copy(update={"daily_run_quota": 2, "max_active_runs": 10})
    with pytest.raises(store.RunRefused, match="daily limit"):
        env.submit(settings=daily)


def test_cancel_queued_now_and_running_through_the_worker(env: Any) -> None:
    queued, running = env.submit(), env.submit()
    claims.claim(env.factory, running.id, "w1")
    with env.factory() as s:
        assert store.cancel_run(s, queued.id, "alice").status == "cancelled"
        r = store.cancel_run(s, running.id, "alice")
        assert r.status == "running" and r.cancel_requested
        assert claims.cancel_requests(s, "w1") == {running.id}
    assert claims.claim(env.factory, queued.id, "w1") is None  # its queue message is skipped


def _age_heartbeat(env: Any, run_id: str, seconds: float) -> None:
    with env.factory() as s:
        s.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(heartbeat_at=utcnow() - timedelta(seconds=seconds))
        )
        s.commit()


def test_reaper_requeues_a_lost_run_once_then_fails_it(env: Any) -> None:
    run = env.submit()
    env.queue.flush()
    claims.claim(env.factory, run.id, "dead-worker")
    assert claims.reap(env.factory, env.queue, env.settings).requeued == []  # heartbeat is fresh
    _age_heartbeat(env, run.id, env.settings.reaper_grace_seconds + 1)
    report = claims.reap(env.factory, env.queue, env.settings)
    assert report.requeued == [run.id]
    assert env.queue.pending_ids("cpu") == {run.id}
    assert env.queue.dequeue(["cpu-short", "cpu"]) == ("cpu-short", run.id)  # a short run
    claims.claim(env.factory, run.id, "second-dead-worker")  # attempt 2 of max_attempts=2
    _age_heartbeat(env, run.id, env.settings.reaper_grace_seconds + 1)
    report = claims.reap(env.factory, env.queue, env.settings)
    assert report.failed == [run.id]
    with env.factory() as s:
        row = s.get(Run, run.id)
        assert row.status == "failed" and row.error.startswith("worker lost")
        assert [e.data["code"] for e in store.events_after(s, run.id)] == ["worker_lost"]
    # A stale worker cannot write into the run any more.
    assert not claims.append_events(
        env.factory, run.id, "second-dead-worker", [("log", {"text": "late"})]
    )


def test_reaper_reenqueues_queued_runs_the_queue_lost(env: Any) -> None:
    run = env.submit()
    env.queue.flush()
    assert (
        claims.reap(env.factory, env.queue, env.settings).reenqueued == []
    )  # too young: maybe in flight
    with env.factory() as s:
        s.execute(
            update(Run)
            .where(Run.id == run.id)
            .values(created_at=utcnow() - timedelta(seconds=claims.LOST_QUEUED_MIN_AGE_S + 1))
        )
        s.commit()
    assert claims.reap(env.factory, env.queue, env.settings).reenqueued == [run.id]
    assert (
        claims.reap(env.factory, env.queue, env.settings).reenqueued == []
    )  # now it is queued: no duplicate
