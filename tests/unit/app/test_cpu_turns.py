"""app.cpu: route threads run Python in turns and give theirs back while they wait for
the database, so a busy threadpool cannot starve the event loop of the GIL."""

from __future__ import annotations

import threading
import time

import pytest

from app import cpu


@pytest.fixture
def one_turn():
    saved = cpu._TURNS
    cpu.configure(1)
    yield cpu._TURNS
    cpu._TURNS = saved


def test_one_turn_serialises_python_but_not_waiting_for_io(one_turn) -> None:
    inside, overlap, io_overlap = [], [], []
    lock = threading.Lock()
    in_io = []

    @cpu.in_turn
    def route(i: int) -> int:
        with lock:
            inside.append(i)
            overlap.append(len(inside))
        time.sleep(0.05)  # "Python work" while holding the turn
        with lock:
            inside.remove(i)
        cpu.waiting_for_io()  # a query: the turn goes to another thread
        with lock:
            in_io.append(i)
            io_overlap.append(len(in_io))
        time.sleep(0.2)
        with lock:
            in_io.remove(i)
        cpu.back_from_io()
        return i

    threads = [threading.Thread(target=route, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(overlap) == 1  # never two threads in their Python part at once
    assert max(io_overlap) >= 3  # but their queries overlapped
    assert one_turn._sem.acquire(blocking=False)  # every turn was given back


def test_a_turn_is_never_a_deadlock(one_turn) -> None:
    # The holder waits for something only a turnless thread can give: the other thread
    # waits TURN_WAIT_S for the turn, then goes on without it.
    release = threading.Event()
    done = []

    @cpu.in_turn
    def holder() -> None:
        assert release.wait(5)

    @cpu.in_turn
    def other() -> None:
        done.append(time.monotonic())
        release.set()

    t0 = time.monotonic()
    a = threading.Thread(target=holder)
    a.start()
    time.sleep(0.05)
    b = threading.Thread(target=other)
    b.start()
    a.join(5)
    b.join(5)
    assert done and cpu.TURN_WAIT_S <= done[0] - t0 < cpu.TURN_WAIT_S + 1
    assert one_turn._sem.acquire(blocking=False)


def test_outside_routes_the_hooks_do_nothing(one_turn) -> None:
    cpu.waiting_for_io()
    cpu.back_from_io()  # not a route thread: takes no turn
    assert one_turn._sem.acquire(blocking=False)
