"""Queue positions, live-worker counts and the worker's view of database errors."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.exc import DataError, IntegrityError, OperationalError

from app.db import Learner, Run, Worker, make_engine, make_sessionmaker, utcnow
from app.errors import DATABASE_DOWN_MESSAGE, DISK_FULL_MESSAGE, storage_error_message
from app.runs import store
from app.runs.worker import is_transient_db_error
from app.settings import Settings


@pytest.fixture
def factory(migrated: Settings) -> Any:
    f = make_sessionmaker(make_engine(migrated.db_url))
    with f() as s:
        s.add(Learner(id="alice"))
        s.commit()
    yield f
    f.kw["bind"].dispose()


def add(
    factory: Any,
    queue: str,
    age_s: float,
    run_id: str,
    status: str = "queued",
    learner: str = "alice",
    estimate_s: float | None = None,
) -> None:
    with factory() as s:
        if s.get(Learner, learner) is None:
            s.add(Learner(id=learner))
        s.add(
            Run(
                id=run_id,
                learner_id=learner,
                lab_id="x",
                queue=queue,
                status=status,
                estimate_s=estimate_s,
                created_at=utcnow() - timedelta(seconds=age_s),
            )
        )
        s.commit()


def position(factory: Any, run_id: str) -> int | None:
    with factory() as s:
        run = s.get(Run, run_id)
        return store.queue_position(s, run, Settings(_env_file=None))  # type: ignore[call-arg]


def place(factory: Any, run_id: str, settings: Settings) -> store.Place | None:
    with factory() as s:
        return store.queue_place(s, s.get(Run, run_id), settings)


def test_learners_take_turns_and_one_with_a_run_running_waits_for_the_others(
    factory: Any,
) -> None:
    """Round-robin between learners: bob's one run is not behind alice's three, and
    carol, whose run is already running, comes after alice's and bob's first runs
    for her next one (and, older, before alice's second)."""
    for i, age in enumerate((50, 40, 30)):
        add(factory, "cpu", age, f"alice-{i}", estimate_s=60)
    add(factory, "cpu", 20, "bob-0", learner="bob", estimate_s=60)
    add(factory, "cpu", 60, "carol-run", status="running", learner="carol", estimate_s=60)
    add(factory, "cpu", 45, "carol-0", learner="carol", estimate_s=60)
    order = ["alice-0", "bob-0", "carol-0", "alice-1", "alice-2"]
    assert [position(factory, r) for r in order] == [1, 2, 3, 4, 5]


def test_short_runs_have_their_own_lane_and_the_wait_counts_the_runs_ahead(
    factory: Any, migrated: Settings
) -> None:
    with factory() as s:
        s.add(Worker(id="w", host="h", pid=1, queues="cpu", last_heartbeat=utcnow()))
        s.commit()
    add(factory, "cpu", 50, "long-a", estimate_s=100)
    add(factory, "cpu", 40, "long-b", learner="bob", estimate_s=100)
    add(factory, "cpu", 30, "short-a", learner="carol", estimate_s=1)
    add(factory, "cpu", 20, "short-b", learner="dan", estimate_s=2)
    settings = migrated.model_copy(update={"worker_concurrency": 1, "short_lane_slots": 1})
    short = place(factory, "short-b", settings)
    # Behind one short run (1 s) only, on two slots (the worker's own and its short one).
    assert short == store.Place(2, 0.5)
    long = place(factory, "long-b", settings)
    # Behind long-a and both short runs, on the one general slot.
    assert long == store.Place(2, 103.0)


def test_position_counts_older_queued_runs_of_the_same_queue_only(factory: Any) -> None:
    add(factory, "gpu", 30, "g-old")
    add(factory, "gpu", 20, "g-mid")
    add(factory, "gpu", 10, "g-new")
    add(factory, "cpu", 40, "c-older")  # another queue: not ahead of gpu runs
    add(factory, "gpu", 50, "g-running", status="running")  # not waiting
    add(factory, "gpu", 60, "g-done", status="succeeded")
    assert [position(factory, r) for r in ("g-old", "g-mid", "g-new")] == [1, 2, 3]
    assert position(factory, "c-older") == 1
    assert position(factory, "g-running") is None and position(factory, "g-done") is None
    with factory() as s:
        s.execute(update(Run).where(Run.id == "g-old").values(status="cancelled"))
        s.commit()
    assert [position(factory, r) for r in ("g-mid", "g-new")] == [1, 2]


def test_runs_created_in_the_same_instant_get_distinct_places(factory: Any) -> None:
    now = utcnow()
    with factory() as s:
        for rid in ("b", "a", "c"):
            s.add(Run(id=rid, learner_id="alice", lab_id="x", queue="cpu", created_at=now))
        s.commit()
    assert [position(factory, r) for r in ("a", "b", "c")] == [1, 2, 3]


def test_live_workers_counts_only_heartbeating_workers_of_the_queue(
    factory: Any, migrated: Settings
) -> None:
    now = utcnow()
    stale = now - timedelta(seconds=migrated.reaper_grace_seconds + 1)
    with factory() as s:
        s.add_all(
            [
                Worker(id="w1", host="h", pid=1, queues="gpu,cpu", last_heartbeat=now),
                Worker(id="w2", host="h", pid=2, queues="cpu", last_heartbeat=now),
                Worker(id="w3", host="h", pid=3, queues="gpu", last_heartbeat=stale),
                Worker(
                    id="w4", host="h", pid=4, queues="gpu", last_heartbeat=now, status="stopped"
                ),
            ]
        )
        s.commit()
        assert store.live_workers(s, "gpu", migrated) == 1
        assert store.live_workers(s, "cpu", migrated) == 2


def _op(message: str) -> OperationalError:
    return OperationalError("SELECT 1", {}, Exception(message))


def test_outages_are_told_apart_from_bugs() -> None:
    assert storage_error_message(_op("database or disk is full"))[0] == DISK_FULL_MESSAGE
    assert (
        storage_error_message(_op("could not extend file: No space left"))[0] == DISK_FULL_MESSAGE
    )
    msg, retry = storage_error_message(_op("connection refused"))
    assert msg == DATABASE_DOWN_MESSAGE and retry > 0
    assert is_transient_db_error(_op("server closed the connection unexpectedly"))
    assert not is_transient_db_error(IntegrityError("INSERT", {}, Exception("duplicate key")))
    assert not is_transient_db_error(DataError("INSERT", {}, Exception("NUL")))
    assert not is_transient_db_error(ValueError("a bug"))
