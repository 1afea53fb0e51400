"""Run one lab in a sandboxed child, forked by a launcher: the worker's fork server
(``forkserver``), or this process itself (``local_launcher``).

The forking process has torch imported and has done no tensor work, so the fork
is cheap (tens of milliseconds) and the child may start torch's thread pool. The
child talks to the process running ``execute`` over two pipes: fd 3 carries JSON
lines (``hello`` with the protections in force, ``event``, then ``result`` or
``error``), fds 1 and 2 carry whatever the lab prints. ``execute`` turns both into
run events, caps what it stores (``collector``), enforces the wall-time limit, and
kills the child's whole process tree (``trees``) on time-out, cancellation, or
when this worker no longer owns the run.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import resource
import selectors
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from labs.base import EventContext, Lab, LabParams
from labs.runtime.collector import Collector, EventBatch
from labs.runtime.limits import MIB, Protections, SandboxConfig
from labs.runtime.sandbox import (
    die_with_parent,
    enter,
    prepare_torch,
    sandbox_ids,
)
from labs.runtime.trees import Tree, Trees, reap

# Seconds between writes of a batch of events to the database: bounds the
# write rate of a chatty lab and the latency of the stream.
FLUSH_INTERVAL_S = 0.1
# Seconds between cancellation checks.
STOP_CHECK_S = 0.2
# After the child exits, how long grandchildren may keep its pipes open.
DRAIN_AFTER_EXIT_S = 0.5
# Seconds between checks for the child's exit once it has closed its pipes.
EXIT_POLL_S = 0.002
READ_CHUNK = 65536
EXIT_SETUP_FAILED = 70  # EX_SOFTWARE: the child failed before the lab started
# A child's fds 0-2 are stdio, 3 is the event pipe; everything above is closed.
EVENT_FD = 3
HIGH_FD = 100


@dataclass
class Outcome:
    """How a run ended. ``status`` is a run status, or ``lost`` (another worker owns it)."""

    status: str
    result: dict[str, Any] | None = None
    error: str | None = None
    reason: str | None = None  # memory | time | crash | lab | sandbox | output
    sandbox: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


@dataclass
class Job:
    lab: Lab
    params: LabParams
    config: SandboxConfig


def _is_out_of_memory(e: BaseException) -> bool:
    if isinstance(e, MemoryError):
        return True
    text = str(e).lower()
    return type(e).__name__ == "OutOfMemoryError" or any(
        s in text
        for s in (
            "can't allocate memory",
            "cannot allocate memory",
            "out of memory",
            "unable to allocate",
        )
    )


class _Pipe:
    """The child's end of the event pipe: one JSON object per line."""

    def __init__(self, fd: int):
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg, default=str, allow_nan=False) + "\n").encode()
        with self.lock:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]


def _child(
    job: Job | Callable[[], Job],
    ev_w: int,
    out_w: int,
    parent_pid: int,
    fallback_tmp: str,
) -> None:
    """Body of the forked child; never returns."""
    code = EXIT_SETUP_FAILED
    try:
        if not isinstance(job, Job):
            # The fork server hands over a loader: the job's parameters are read here,
            # in the child, so the server's own memory never holds a learner's input.
            job = job()
        # Die with the forking process from the start (the user switch in ``enter``
        # clears this, and it sets it again): nobody else could kill this child.
        die_with_parent()
        os.setsid()  # its own process group: the parent kills the group
        stdin_from_devnull()
        stdio(ev_w, out_w)
        default_signals()
        protections, tmpdir = enter(job.config, fallback_tmp, parent_pid)
        code = run_lab(job, protections, tmpdir)
    except BaseException as e:
        setup_failed(e)
    finally:
        os._exit(code)


def stdin_from_devnull() -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def stdio(ev_w: int, out_w: int) -> None:
    """The child's descriptors: 1 and 2 to the output pipe, ``EVENT_FD`` to the event
    pipe, every other one above it closed; sys.std* rebuilt on them."""
    ev_hi = fcntl.fcntl(ev_w, fcntl.F_DUPFD, HIGH_FD)
    out_hi = fcntl.fcntl(out_w, fcntl.F_DUPFD, HIGH_FD)
    os.dup2(out_hi, 1)
    os.dup2(out_hi, 2)
    os.dup2(ev_hi, EVENT_FD)
    os.closerange(EVENT_FD + 1, resource_max_fd())
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)


def default_signals() -> None:
    """Undo the forking process's handlers and wake-up fd."""
    for sig in (
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGCHLD,
    ):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)


def run_lab(job: Job, protections: Protections, tmpdir: str, ahead: bool = False) -> int:
    """In the sandboxed child, its descriptors in place (``stdio``): torch's set-up,
    ``hello``, the lab, then ``result`` or ``error`` on the event pipe. Returns the
    exit code; raises only if torch's set-up fails (a sandbox failure). ``ahead``: the
    sandbox was set up before the job arrived (a spare, see ``spare``)."""
    pipe = _Pipe(EVENT_FD)
    cfg = job.config
    env = prepare_torch(cfg, protections)
    env["sandbox_ready_ahead"] = ahead
    pipe.send({"t": "hello", "sandbox": protections.items, "env": env})
    ctx = EventContext(
        lambda kind, data: pipe.send({"t": "event", "kind": kind, "data": data}),
        device="cuda" if env["device"].startswith("cuda") else "cpu",
        tmpdir=tmpdir,
    )
    try:
        result = job.lab.execute(job.params, ctx)
        sys.stdout.flush()
        pipe.send({"t": "result", "result": _finite(result.model_dump(mode="json"))})
        return 0
    except BaseException as e:  # every failure becomes a message the learner can act on
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        if _is_out_of_memory(e):
            limit = cfg.memory_bytes // MIB
            pipe.send(
                {
                    "t": "error",
                    "reason": "memory",
                    "message": f"The lab ran out of memory: it may use {limit} MiB. "
                    f"Try a smaller size. ({type(e).__name__}: {str(e)[:300]})",
                }
            )
        else:
            pipe.send(
                {"t": "error", "reason": "lab", "message": f"{type(e).__name__}: {str(e)[:1000]}"}
            )
        return 1


def setup_failed(e: BaseException) -> None:
    """Tell the parent, on the event pipe, that the sandbox could not be set up."""
    message = f"sandbox set-up failed: {type(e).__name__}: {e}"
    try:
        os.write(
            EVENT_FD,
            (json.dumps({"t": "error", "reason": "sandbox", "message": message}) + "\n").encode(),
        )
    except OSError:
        pass


def resource_max_fd() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


class Handle(Protocol):
    """A started lab child, as ``execute`` drives it. ``items`` are the protections
    the side that forked it vouches for (``secrets``, ``process_tree``)."""

    pid: int
    items: dict[str, dict[str, Any]]

    def poll(self) -> tuple[int, Any] | None:
        """(wait status, rusage) once the child has exited, else None. A status of
        ``SERVER_LOST`` means the process that forked it is gone."""

    def wait(self) -> tuple[int, Any]:
        """Block until the child has exited: (wait status, rusage)."""

    def kill(self) -> None:
        """SIGKILL the child and every process it started."""

    def close(self) -> None:
        """Release what the handle holds (after the child has exited)."""


# (job, its event pipe's write end, its output pipe's write end, its fallback temp dir)
Launcher = Callable[[Job, int, int, str], Handle]
SERVER_LOST = -1


def start_child(
    job: Job | Callable[[], Job], ev_w: int, out_w: int, fallback_tmp: str, trees: Trees
) -> Tree:
    """Fork the sandboxed child that runs ``job`` (or what the loader ``job`` returns,
    called in the child) with its process tree contained; returns in the parent only."""
    tree = trees.fork()
    if tree.pid == 0:  # pragma: no cover - the child's coverage is measured by its effects
        _child(job, ev_w, out_w, os.getppid(), fallback_tmp)
    return tree


class LocalChild:
    """A child forked from this very process (for tools and tests; the worker forks
    from its fork server instead, see ``forkserver``)."""

    def __init__(self, job: Job, ev_w: int, out_w: int, fallback_tmp: str, trees: Trees):
        self.tree = start_child(job, ev_w, out_w, fallback_tmp, trees)
        self.pid = self.tree.pid
        self.items: dict[str, dict[str, Any]] = {
            "secrets": {
                "enabled": False,
                "detail": "forked from the calling process itself: whatever it holds in "
                "memory the lab can read; inherited file descriptors closed",
            }
        }

    def _exited(self, status: int, rusage: Any) -> tuple[int, Any]:
        self.items.update(self.tree.finish())
        return status, rusage

    def poll(self) -> tuple[int, Any] | None:
        done = reap(self.pid, self.tree, block=False)
        return self._exited(done[1], done[2]) if done else None

    def wait(self) -> tuple[int, Any]:
        done = reap(self.pid, self.tree)
        assert done is not None
        return self._exited(done[1], done[2])

    def kill(self) -> None:
        self.tree.kill()

    def close(self) -> None:
        pass


def local_launcher(trees: Trees | None = None) -> Launcher:
    """Fork children from this process, their trees contained by ``trees``."""
    held = trees or Trees()
    return lambda job, ev_w, out_w, tmp: LocalChild(job, ev_w, out_w, tmp, held)


def execute(
    job: Job,
    on_events: Callable[[EventBatch], bool],
    should_stop: Callable[[], bool] = lambda: False,
    launch: Launcher | None = None,
) -> Outcome:
    """Start ``job`` in a sandboxed child through ``launch`` (by default a fork of
    this process, which must then have imported torch but done no tensor work);
    stream its events through ``on_events`` (which returns False when the run was
    taken away); returns how it ended."""
    cfg = job.config
    started = time.monotonic()
    fallback_tmp = tempfile.mkdtemp(prefix="lowbit-run-")
    ids = sandbox_ids(cfg.user) if os.geteuid() == 0 else None
    if ids is not None:
        os.chown(fallback_tmp, *ids)
    ev_r, ev_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        child = (launch or local_launcher())(job, ev_w, out_w, fallback_tmp)
    except BaseException:
        for fd in (ev_r, out_r):
            os.close(fd)
        shutil.rmtree(fallback_tmp, ignore_errors=True)
        raise
    finally:
        os.close(ev_w)
        os.close(out_w)
    col = Collector(cfg)
    kill_reason: str | None = None
    status_code: int | None = None
    rusage: Any = None
    sel = selectors.DefaultSelector()
    for fd in (ev_r, out_r):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    last_flush = last_stop_check = started
    exited_at: float | None = None
    # From the fork, not from the request: a fork server restarting (seconds) is not the lab's time.
    deadline = time.monotonic() + cfg.wall_s

    kill = child.kill

    def flush() -> None:
        nonlocal kill_reason
        batch = col.take()
        if batch and not on_events(batch) and kill_reason is None:
            kill_reason = "lost"
            kill()

    try:
        while True:
            if sel.get_map():
                ready = sel.select(timeout=FLUSH_INTERVAL_S / 2)
            else:  # both pipes closed: the child is exiting, poll for it closely
                ready = []
                time.sleep(EXIT_POLL_S)
            for key, _ in ready:
                fd = int(key.fd)  # type: ignore[arg-type]
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    continue
                (col.feed_events if fd == ev_r else col.feed_output)(chunk)
            now = time.monotonic()
            if now - last_flush >= FLUSH_INTERVAL_S or col.result is not None:
                flush()
                last_flush = now
            if status_code is None and (done := child.poll()) is not None:
                (status_code, rusage), exited_at = done, now
            if status_code is not None and (
                not sel.get_map() or now - (exited_at or now) > DRAIN_AFTER_EXIT_S
            ):
                break
            if kill_reason is None and status_code is None:
                if now >= deadline:
                    kill_reason = "timed_out"
                    kill()
                elif now - last_stop_check >= STOP_CHECK_S:
                    last_stop_check = now
                    if should_stop():
                        kill_reason = "cancelled"
                        kill()
    finally:
        kill()  # grandchildren the lab left behind
        if status_code is None:
            status_code, rusage = child.wait()
        child.close()
        sel.close()
        os.close(ev_r)
        os.close(out_r)
        shutil.rmtree(fallback_tmp, ignore_errors=True)
    duration = time.monotonic() - started
    if kill_reason != "lost":
        flush()
    return _outcome(job, col, kill_reason, status_code, rusage, duration, child.items)


def _outcome(
    job: Job,
    col: Collector,
    kill_reason: str | None,
    status_code: int,
    rusage: Any,
    duration: float,
    launched: dict[str, dict[str, Any]],
) -> Outcome:
    cfg = job.config
    p = Protections({**((col.hello or {}).get("sandbox") or {}), **launched})
    p.set("wall_time", True, f"{cfg.wall_s:g} s, then the process group is killed")
    p.set(
        "output",
        True,
        f"events and printed output capped at {cfg.output_bytes:,} bytes"
        + (f"; truncated, {col.dropped:,} bytes dropped" if col.truncated else "; not reached"),
    )
    p.items["output"]["truncated"] = col.truncated
    env = dict((col.hello or {}).get("env") or {})
    if rusage is not None:
        env["cpu_seconds"] = round(rusage.ru_utime + rusage.ru_stime, 3)
        env["peak_rss_bytes"] = int(rusage.ru_maxrss) * 1024
    out = Outcome(status="failed", sandbox=p.items, environment=env, duration_s=round(duration, 4))
    if status_code == SERVER_LOST:
        out.reason = "sandbox"
        out.error = "The worker's lab fork server stopped during the run; it was restarted."
        return out
    signalled = os.WIFSIGNALED(status_code)
    sig = os.WTERMSIG(status_code) if signalled else None
    exit_code = os.WEXITSTATUS(status_code) if os.WIFEXITED(status_code) else None
    if kill_reason == "timed_out":
        out.status, out.reason = "timed_out", "time"
        out.error = f"The lab ran longer than its time limit of {cfg.wall_s:g} s and was stopped."
    elif kill_reason == "cancelled":
        out.status, out.reason, out.error = "cancelled", "cancelled", "Cancelled by the learner."
    elif kill_reason == "lost":
        out.status, out.reason = "lost", "lost"
    elif col.result is not None and exit_code == 0 and col.error is None:
        out.status, out.result = "succeeded", col.result
    elif col.error is not None:
        out.reason = str(col.error.get("reason") or "lab")
        out.error = str(col.error.get("message"))
    elif sig == signal.SIGXCPU or (
        sig == signal.SIGKILL and env.get("cpu_seconds", 0) >= cfg.cpu_s
    ):
        out.status, out.reason = "timed_out", "time"
        out.error = f"The lab used more than its CPU-time limit of {cfg.cpu_s} s and was stopped."
    elif sig == signal.SIGKILL:
        out.reason = "memory"
        out.error = "The lab was killed by the system, most likely for using too much memory."
    elif sig is not None:
        memory = "bad_alloc" in col.stderr_tail or "Cannot allocate memory" in col.stderr_tail
        out.reason = "memory" if memory else "crash"
        out.error = f"The lab process crashed ({signal.Signals(sig).name})" + (
            ": it ran out of memory." if memory else "."
        )
    elif exit_code == EXIT_SETUP_FAILED:
        out.reason, out.error = (
            "sandbox",
            "The sandbox could not be set up; the site's operators have the details.",
        )
    else:
        out.reason = "crash"
        out.error = f"The lab process exited with code {exit_code} without a result."
    return out
