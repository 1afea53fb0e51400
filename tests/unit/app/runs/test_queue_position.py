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


def add(factory: Any, queue: str, age_s: float, run_id: str, status: str = "queued") -> None:
    with factory() as s:
        s.add(
            Run(
                id=run_id,
                learner_id="alice",
                lab_id="x",
                queue=queue,
                status=status,
                created_at=utcnow() - timedelta(seconds=age_s),
            )
        )
        s.commit()


def position(factory: Any, run_id: str) -> int | None:
    with factory() as s:
        run = s.get(Run, run_id)
        return store.queue_position(s, run)


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
