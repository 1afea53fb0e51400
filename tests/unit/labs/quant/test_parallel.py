"""CPU chunks on Python threads (labs.quant.parallel) and the chunked metrics: same
results as in line, the caller's thread setting restored."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import pytest
import torch

from labs.quant import FORMATS, core, quantize
from labs.quant.metrics import clipped_mask, error_report, error_split
from labs.quant.parallel import cpu_workers, map_chunks, map_largest_first, set_workers


@pytest.fixture(autouse=True)
def _two_threads() -> Iterator[None]:
    """Two intra-op threads (what the worker and the benchmarks use), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_map_chunks_keeps_order_and_restores_threads() -> None:
    seen: list[int] = []

    def work(i: int) -> int:
        seen.append(torch.get_num_threads())  # intra-op parallelism 1 inside
        return i * i

    assert map_chunks(work, range(9)) == [i * i for i in range(9)]
    assert set(seen) == {1}
    assert torch.get_num_threads() == 2 and cpu_workers() == 2


def test_a_worker_budget_spreads_maps_over_threads_whatever_torch_uses() -> None:
    # The lab sandbox: 1 intra-op thread, but a budget of 2 for chunked work.
    torch.set_num_threads(1)
    names: set[str] = set()
    barrier = threading.Barrier(2, timeout=5)

    def work(i: int) -> int:
        names.add(threading.current_thread().name)
        barrier.wait()  # only returns when two chunks run at the same time
        return i

    try:
        assert map_chunks(lambda i: i, range(4)) == [0, 1, 2, 3]  # no budget: in line
        set_workers(2)
        assert cpu_workers() == 2
        assert map_chunks(work, range(2)) == [0, 1]
        assert len(names) == 2 and "MainThread" not in names
        assert torch.get_num_threads() == 1  # the caller's setting is back
        with pytest.raises(ValueError, match="at least 1"):
            set_workers(0)
    finally:
        set_workers(None)
    assert cpu_workers() == 1


def test_map_chunks_nested_and_failing() -> None:
    inner_threads: list[str] = []

    def inner(i: int) -> int:
        inner_threads.append(threading.current_thread().name)
        return i

    def outer(i: int) -> list[int]:
        return map_chunks(inner, [i, i + 1])  # runs in line on the worker

    assert map_chunks(outer, [0, 10]) == [[0, 1], [10, 11]]
    assert "MainThread" not in inner_threads

    def fail(i: int) -> int:
        raise RuntimeError(f"chunk {i}")

    with pytest.raises(RuntimeError, match="chunk"):
        map_chunks(fail, [1, 2])
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("key", ["q4_k", "q6_k", "q4_0", "nvfp4", "nf4", "mxfp4"])
def test_many_threaded_chunks_match_one_chunk(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bit for bit, with chunks much smaller than the tensor (so several run at once)."""
    x = torch.randn(12, 1024, generator=torch.Generator().manual_seed(7))
    x[3, 100:140] = 0.0  # flat sub-blocks
    x[5, 7] = 300.0  # an outlier
    default = quantize(x, key)
    monkeypatch.setattr(core, "CPU_CHUNK_ELEMENTS", 1 << 30)
    torch.set_num_threads(1)
    try:
        whole = quantize(x, key)
    finally:
        torch.set_num_threads(2)
    monkeypatch.setattr(core, "CPU_CHUNK_ELEMENTS", 256)
    small = quantize(x, key)
    for q in (default, small):
        assert torch.equal(q.codes, whole.codes)
        assert q.to_bytes() == whole.to_bytes()
        assert torch.equal(q.dequantize(), whole.dequantize())


@pytest.mark.parametrize("key", sorted(FORMATS))
def test_chunked_error_report_matches_one_pass_split(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core, "CPU_CHUNK_ELEMENTS", 512)  # many chunks
    x = torch.randn(16, 512, generator=torch.Generator().manual_seed(3))
    x.view(-1)[::97] *= 40.0
    q = quantize(x, key)
    report = error_report(x, q, q.dequantize())
    one_pass = error_split(x, q.dequantize(), clipped_mask(x, q))
    assert report.clipped_count == one_pass.clipped_count
    assert report.max_abs_error == one_pass.max_abs_error
    for name in ("mse", "sqnr_db", "mean_abs_error", "rounding_mse", "clipping_mse"):
        assert math.isclose(getattr(report, name), getattr(one_pass, name), rel_tol=1e-12), name


def test_error_report_rejects_a_dequantized_tensor_of_another_shape() -> None:
    x = torch.randn(4, 64)
    q = quantize(x, "q8_0")
    with pytest.raises(ValueError, match="x_hat"):
        error_report(x, q, torch.zeros(4, 32))


def test_maps_reuse_their_threads_and_a_forked_child_starts_its_own() -> None:
    """The pool is kept between maps (a model lab makes ~120), and a child forked after a
    map (whose pool threads were not copied) still maps, on threads of its own."""
    import os
    import signal

    def names() -> set[str]:
        barrier = threading.Barrier(2, timeout=5)

        def work(_: int) -> str:
            barrier.wait()  # both chunks on threads at once
            return threading.current_thread().name

        return set(map_chunks(work, range(2)))

    first = names()
    assert len(first) == 2 and "MainThread" not in first
    assert names() == first  # the same two threads, not two new ones
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            signal.alarm(10)  # a child waiting on its parent's threads would hang
            got = names()
            os.write(w, ("ok" if len(got) == 2 else f"bad {got}").encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        report = os.read(r, 100).decode()
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert report == "ok"


def test_map_largest_first_hands_out_the_largest_first_and_keeps_the_order() -> None:
    """With one thread the items run in the order they are handed out: largest first,
    equal sizes in their own order; the results come back in the items' order."""
    items = ["bb", "a", "dddd", "cc", "eeee"]
    ran: list[str] = []

    def work(s: str) -> str:
        ran.append(s)
        return s.upper()

    set_workers(1)
    try:
        assert map_largest_first(work, items, len) == [s.upper() for s in items]
    finally:
        set_workers(None)
    assert ran == ["dddd", "eeee", "bb", "cc", "a"]
    assert map_largest_first(work, items, len) == [s.upper() for s in items]  # on 2 threads
