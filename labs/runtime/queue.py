"""The run queue: huey storage carrying run ids only; the database is the truth.

Two queues, ``cpu`` and ``gpu``. SQLite (one file under ``data_dir``) unless
``queue_url`` is ``redis://…``; the message format and the code are the same.
A message is a huey task ``lowbit.run_lab(run_id)``. Workers pull messages with
their own loop rather than huey's consumer, because each message becomes a
forked sandboxed child of a warm parent, not a function call in a worker thread.
Delivery is at-least-once: a worker claims a run with an atomic UPDATE and skips
ids that are no longer ``queued``, so a duplicate message is harmless.
"""

from __future__ import annotations

from typing import Any

from huey import Huey, RedisHuey, SqliteHuey

from app.settings import Settings

QUEUES = ("cpu", "gpu")
TASK_NAME = "lowbit.run_lab"
QUEUE_FILE = "queue.db"
# Seconds SQLite waits for a lock held by another process before giving up.
SQLITE_BUSY_TIMEOUT_S = 10


def _run_lab(run_id: str) -> None:
    raise RuntimeError(
        "lowbit runs are executed by `lowbit worker` (forked sandboxed children), "
        "not by huey's consumer"
    )


class RunQueue:
    """Enqueue and dequeue run ids on the ``cpu`` and ``gpu`` queues."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._hueys: dict[str, Huey] = {}
        self._tasks: dict[str, Any] = {}
        for name in QUEUES:
            huey = self._make(name)
            self._hueys[name] = huey
            self._tasks[name] = huey.task(name=TASK_NAME)(_run_lab)

    @property
    def backend(self) -> str:
        return "redis" if self.settings.queue_url.startswith("redis") else "sqlite"

    def _make(self, name: str) -> Huey:
        url = self.settings.queue_url
        if url.startswith(("redis://", "rediss://", "unix://")):
            # Non-blocking pops: one worker polls both queues in turn.
            return RedisHuey(f"lowbit-{name}", url=url, results=False, blocking=False)
        if url:
            raise ValueError(
                f"unsupported queue_url {url!r}: use redis://host:port/db or leave empty"
            )
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        return SqliteHuey(
            f"lowbit-{name}",
            filename=str(self.settings.data_dir / QUEUE_FILE),
            results=False,
            timeout=SQLITE_BUSY_TIMEOUT_S,
        )

    def enqueue(self, run_id: str, queue: str) -> None:
        self._tasks[queue](run_id)

    def dequeue(self, queues: list[str]) -> tuple[str, str] | None:
        """The next (queue, run id) from the first non-empty queue in ``queues``."""
        for name in queues:
            task = self._hueys[name].dequeue()
            if task is not None and task.args:
                return name, str(task.args[0])
        return None

    def pending_ids(self, queue: str) -> set[str]:
        """Run ids waiting in ``queue`` (reads the whole queue: for the reaper, not hot paths)."""
        return {str(t.args[0]) for t in self._hueys[queue].pending() if t.args}

    def pending_count(self, queue: str) -> int:
        return int(self._hueys[queue].pending_count())

    def flush(self) -> None:
        """Drop every message (tests and `queue lost` drills only)."""
        for huey in self._hueys.values():
            huey.flush()
