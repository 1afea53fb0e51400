"""The run queue: huey storage carrying run ids only; the database is the truth.

Two queues, ``cpu`` and ``gpu``. SQLite (one file under ``data_dir``) unless
``queue_url`` is ``redis://…``; the message format and the code are the same.
A message is a huey task ``lowbit.run_lab(run_id)``. Workers pull messages with
their own loop rather than huey's consumer, because each message becomes a
forked sandboxed child of a warm parent, not a function call in a worker thread.
Delivery is at-least-once: a worker claims a run with an atomic UPDATE and skips
ids that are no longer ``queued``, so a duplicate message is harmless.

Each queue has two lanes, each its own huey queue: ``cpu`` and ``cpu-short`` (runs
estimated under ``short_run_seconds``, app.runs.cost). A message is a turn in its
lane, not a claim on its run: the worker that takes it claims the run of that lane
whose turn it is (``claims.claim_next``: round-robin between learners), so each
lane holds at least as many messages as it has queued runs.
"""

from __future__ import annotations

import threading
from typing import Any

from huey import Huey, RedisHuey, SqliteHuey

from app.runs.bells import WORKERS, Ringer
from app.settings import Settings

QUEUES = ("cpu", "gpu")
SHORT_SUFFIX = "-short"
TASK_NAME = "lowbit.run_lab"
QUEUE_FILE = "queue.db"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
# Seconds SQLite waits for a lock held by another process before giving up.
SQLITE_BUSY_TIMEOUT_S = 10


def _run_lab(run_id: str) -> None:
    raise RuntimeError(
        "lowbit runs are executed by `lowbit worker` (forked sandboxed children), "
        "not by huey's consumer"
    )


class RunQueue:
    """Enqueue and dequeue run ids on the ``cpu`` and ``gpu`` queues.

    ``create_app`` and the worker each build one. The storage opens on first use
    (a SQLite queue creates its file and tables then), so building the client
    costs nothing and touches no disk."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._hueys: dict[str, Huey] = {}
        self._tasks: dict[str, Any] = {}
        self._lock = threading.Lock()
        # Wakes this host's idle workers at once (app.runs.bells); others poll.
        self._workers = Ringer(settings.data_dir, WORKERS)
        url = settings.queue_url
        if url and not url.startswith(REDIS_SCHEMES):  # refuse at start-up, not on first run
            raise ValueError(
                f"unsupported queue_url {url!r}: use redis://host:port/db or leave empty"
            )

    def _huey(self, name: str) -> Huey:
        """The huey instance of queue ``name``, opened once (threads share it)."""
        huey = self._hueys.get(name)
        if huey is None:
            with self._lock:
                huey = self._hueys.get(name)
                if huey is None:
                    huey = self._make(name)
                    self._tasks[name] = huey.task(name=TASK_NAME)(_run_lab)
                    self._hueys[name] = huey
        return huey

    @property
    def backend(self) -> str:
        return "redis" if self.settings.queue_url.startswith("redis") else "sqlite"

    def _make(self, name: str) -> Huey:
        url = self.settings.queue_url
        if url:  # a Redis URL (checked in __init__)
            # Non-blocking pops: one worker polls both queues in turn.
            return RedisHuey(f"lowbit-{name}", url=url, results=False, blocking=False)
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        return SqliteHuey(
            f"lowbit-{name}",
            filename=str(self.settings.data_dir / QUEUE_FILE),
            results=False,
            timeout=SQLITE_BUSY_TIMEOUT_S,
        )

    def enqueue(self, run_id: str, queue: str, short: bool = False) -> None:
        """A turn for ``run_id`` in its lane of ``queue``; idle workers are woken."""
        name = lane(queue, short)
        self._huey(name)
        self._tasks[name](run_id)
        self._workers.ring(run_id)

    def dequeue(self, lanes: list[str]) -> tuple[str, str] | None:
        """The next (lane, run id) from the first non-empty lane in ``lanes``."""
        for name in lanes:
            task = self._huey(name).dequeue()
            if task is not None and task.args:
                return name, str(task.args[0])
        return None

    def pending_ids(self, queue: str, short: bool | None = None) -> set[str]:
        """Run ids waiting in ``queue`` (both lanes unless ``short`` names one; reads
        the whole queue: for the reaper, not hot paths)."""
        return {
            str(t.args[0]) for name in _lanes(queue, short) for t in self._huey(name).pending()
            if t.args
        }  # fmt: skip

    def pending_count(self, queue: str, short: bool | None = None) -> int:
        return sum(int(self._huey(name).pending_count()) for name in _lanes(queue, short))

    def flush(self) -> None:
        """Drop every message (tests and `queue lost` drills only)."""
        for name in QUEUES:
            for short in (False, True):
                self._huey(lane(name, short)).flush()


def lane(queue: str, short: bool) -> str:
    """The huey queue of one lane of ``queue``."""
    return queue + SHORT_SUFFIX if short else queue


def lane_of(name: str) -> tuple[str, bool]:
    """(queue, short) of a lane's huey queue name."""
    return name.removesuffix(SHORT_SUFFIX), name.endswith(SHORT_SUFFIX)


def _lanes(queue: str, short: bool | None) -> list[str]:
    return [lane(queue, s) for s in ((False, True) if short is None else (short,))]
