"""Run per-chunk CPU work on Python threads, each running single-threaded torch ops.

Why: the k-quants' scale search runs ~100 small torch ops per candidate scale and chunk,
and every op with intra-op parallelism ends in a barrier that waits for the slowest
thread. On a busy machine (2 cores shared by many processes) one descheduled thread
stalls every barrier for a scheduler time slice: measured here, a 1M-element q4_k
search took 1.27 s with 2 intra-op threads and 0.22 s as two chunks on two Python
threads with one intra-op thread each (torch releases the GIL inside its ops). Each
thread also keeps its own chunk in its own core's L2 cache.

Chunks are whole blocks and every op inside a chunk is elementwise or per block, so the
result does not depend on which thread ran which chunk (nor on the chunk size).

``torch.set_num_threads`` is process-wide: while a map runs, intra-op parallelism is 1
(a torch op another thread runs meanwhile is single-threaded, not wrong), and the
caller's setting is put back when the last concurrent map ends.

How many threads: torch's intra-op thread count, unless ``set_workers`` gave a budget of
its own. The lab sandbox does (labs.runtime.limits): a lab child keeps 1 intra-op
thread, since one-off torch ops on small tensors get slower with more, while a map,
which only spreads work that is at least two chunks of 64 Ki values, may use every core
the run was given.

The threads are kept between maps (one pool per process, rebuilt when the budget
changes): a quant-algorithms run makes ~120 maps, and starting two threads for each
cost 0.06 s of a quiet machine's time and 0.25 s of a busy one's. A forked child
forgets its parent's pool (its threads were not copied) and starts its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_LOCK = threading.Lock()
_DEPTH = 0
_SAVED_THREADS = 1
# Set in the pool's threads: a map started from inside one runs its items in line.
_IN_WORKER = threading.local()
# Threads a map may use (set_workers); None: torch's intra-op thread count.
_BUDGET: int | None = None
# The kept pool and its size (guarded by _LOCK).
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0


def _forget_pool() -> None:
    """In a forked child: the parent's pool threads do not exist here."""
    global _POOL, _POOL_SIZE, _LOCK
    _POOL, _POOL_SIZE = None, 0
    _LOCK = threading.Lock()  # the parent may have held it while forking


os.register_at_fork(after_in_child=_forget_pool)


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads, started (lazily) on first use. A pool
    of another size is dropped, not shut down: a map still using it finishes, and its
    threads exit once nothing refers to it."""
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE != workers:
            _POOL, _POOL_SIZE = ThreadPoolExecutor(workers, "lowbit-chunks"), workers
        return _POOL


def set_workers(workers: int | None) -> None:
    """Threads ``map_chunks`` may use from now on, whatever torch's intra-op setting;
    None goes back to following it."""
    global _BUDGET
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    _BUDGET = workers


@contextmanager
def _single_threaded_ops() -> Iterator[int]:
    """Intra-op parallelism 1 for the duration; yields the caller's thread count (the
    workers to use). Re-entrant across threads: the first entry saves the setting, the
    last exit restores it."""
    import torch

    global _DEPTH, _SAVED_THREADS
    with _LOCK:
        if _DEPTH == 0:
            _SAVED_THREADS = torch.get_num_threads()
            torch.set_num_threads(1)
        _DEPTH += 1
        workers = _BUDGET if _BUDGET is not None else _SAVED_THREADS
    try:
        yield workers
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                torch.set_num_threads(_SAVED_THREADS)


def cpu_workers() -> int:
    """Python threads a CPU map would use: the budget, else the intra-op thread count
    (outside a map)."""
    import torch

    with _LOCK:
        if _BUDGET is not None:
            return _BUDGET
        return _SAVED_THREADS if _DEPTH else torch.get_num_threads()


def map_chunks(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(item) for item in items]``, in order; on several Python threads when there
    is more than one item and more than one intra-op thread (CPU work only: on an
    accelerator the ops are asynchronous launches on one stream, so call ``fn``
    directly)."""
    if len(items) <= 1 or getattr(_IN_WORKER, "active", False) or cpu_workers() <= 1:
        return [fn(item) for item in items]

    def work(item: T) -> R:
        _IN_WORKER.active = True
        return fn(item)

    with _single_threaded_ops() as workers:
        if workers <= 1:
            return [fn(item) for item in items]
        return list(_pool(workers).map(work, items))


def map_largest_first(
    fn: Callable[[T], R], items: Sequence[T], size: Callable[[T], float]
) -> list[R]:
    """``map_chunks(fn, items)`` with the items handed to the threads largest ``size``
    first (equal sizes in their order), results in ``items``' order. The threads take
    items in turn, so a large item handed out last leaves one core working alone at the
    end; the result of each item does not depend on when it ran."""
    order = sorted(range(len(items)), key=lambda i: -size(items[i]))
    done = dict(zip(order, map_chunks(lambda i: fn(items[i]), order), strict=True))
    return [done[i] for i in range(len(items))]
