"""Turns at the interpreter for the threads that serve sync routes.

The web process serves sync routes on ``web_threads`` threads so that database round
trips overlap. But Python runs one thread at a time (the GIL), and the event loop is
one of those threads: when many route threads are busy rendering pages at once, the
loop waits its turn behind each of them (5 ms a turn), and everything the loop does,
/healthz included, slows with the number of busy threads (a 500-request burst: /healthz
p99 136 ms with 16 threads, 37 ms with 6; but 6 threads cut sustained throughput by
half, since most of a request's time is spent waiting for the database).

So a route thread runs Python only while it holds one of ``web_cpu_threads`` turns,
and gives its turn back while it waits for the database (SQLAlchemy's cursor events):
as many threads as ever overlap their queries, but no more than a few compete with the
loop for the interpreter. A thread waiting for a turn sleeps on a semaphore (no GIL).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

_local = threading.local()


# A turn is scheduling, never a lock anything depends on: a thread that waited this
# long goes on without one (so a turn holder that waits for something a turnless
# thread holds, say the last pooled connection, can never deadlock the two).
TURN_WAIT_S = 0.5


class Turns:
    """``n`` turns at the interpreter, taken per thread (re-entrant, idempotent)."""

    def __init__(self, n: int):
        self.n = n
        self._sem = threading.BoundedSemaphore(n)

    def take(self) -> None:
        if not getattr(_local, "held", False):
            _local.held = self._sem.acquire(timeout=TURN_WAIT_S)

    def give_back(self) -> None:
        if getattr(_local, "held", False):
            _local.held = False
            self._sem.release()


_TURNS: Turns | None = None


def configure(n: int) -> None:
    """Set the number of turns for this process."""
    global _TURNS
    _TURNS = Turns(n)


def in_turn(fn: Callable[..., R]) -> Callable[..., R]:
    """``fn`` (a sync route) run holding a turn, given back when it returns."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> R:
        turns = _TURNS
        if turns is None:
            return fn(*args, **kwargs)
        _local.route = True
        turns.take()
        try:
            return fn(*args, **kwargs)
        finally:
            turns.give_back()
            _local.route = False

    return run


def waiting_for_io(*_: Any, **__: Any) -> None:
    """Before a database call from a route: its turn goes to another thread."""
    if _TURNS is not None and getattr(_local, "route", False):
        _TURNS.give_back()


def back_from_io(*_: Any, **__: Any) -> None:
    """After the call (or its error): wait for a turn again."""
    if _TURNS is not None and getattr(_local, "route", False):
        _TURNS.take()
