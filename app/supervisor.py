"""The embedded worker of ``lowbit serve --embedded-worker``, supervised: a worker
that dies (killed, crashed, out of memory) is started again with backoff, so a
one-process install never leaves runs waiting for a worker that is gone. Its
state shows in ``/readyz`` and ``/metrics``."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from prometheus_client import Counter, Gauge

from app.metrics import REGISTRY

log = logging.getLogger("lowbit.supervisor")

# Seconds before the first restart, doubling up to the cap while the worker keeps
# dying young; a worker that ran this long resets the backoff.
RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0
# SIGTERM lets the worker finish or re-queue its runs for this long (it is told to
# hand them back after EMBEDDED_GRACE_S); then the worker's process group is killed.
# Together they keep `lowbit serve`'s whole tree under 5 s from SIGTERM to gone.
EMBEDDED_GRACE_S = 2.0
STOP_TIMEOUT_S = 4.0

RESTARTS = Counter(
    "lowbit_embedded_worker_restarts_total",
    "Times the embedded worker was started again",
    registry=REGISTRY,
)
UP = Gauge(
    "lowbit_embedded_worker_up", "1 while the embedded worker process is alive", registry=REGISTRY
)


class WorkerSupervisor:
    """Runs ``argv`` and starts it again whenever it exits, until ``stop()``."""

    def __init__(self, argv: list[str] | None = None):
        self.argv = argv or [sys.executable, "-m", "app.cli", "worker"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.last_exit: int | None = None
        self._stopping = threading.Event()
        self._lock = threading.RLock()  # a stop() between the check and the start sees both
        self._thread = threading.Thread(target=self._loop, name="worker-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> str:
        """ "ok", or why not (for /readyz)."""
        if self.alive:
            return "ok"
        return f"restarting (last exit code {self.last_exit}, {self.restarts} restarts)"

    def _loop(self) -> None:
        backoff = RESTART_BACKOFF_S
        while not self._stopping.is_set():
            started = time.monotonic()
            with self._lock:
                if self._stopping.is_set():
                    return
                # Its own session: Ctrl-C in the terminal reaches the server, which
                # stops the worker itself, instead of killing the worker first.
                self.proc = subprocess.Popen(self.argv, env=self._env(), start_new_session=True)
            UP.set(1)
            self.last_exit = self.proc.wait()
            UP.set(0)
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= HEALTHY_AFTER_S:
                backoff = RESTART_BACKOFF_S
            log.warning(
                "embedded worker exited; starting it again",
                extra={"exit_code": self.last_exit, "in_s": backoff},
            )
            if self._stopping.wait(backoff):
                return
            backoff = min(backoff * 2, RESTART_BACKOFF_MAX_S)
            self.restarts += 1
            RESTARTS.inc()

    @staticmethod
    def _env() -> dict[str, str]:
        from app.runs.worker import SUPERVISOR_PID_ENV

        env = os.environ.copy()
        env[SUPERVISOR_PID_ENV] = str(os.getpid())  # the worker dies with this process
        env.setdefault("LOWBIT_WORKER_SHUTDOWN_GRACE_SECONDS", str(EMBEDDED_GRACE_S))
        return env

    def begin_stop(self) -> None:
        """Stop supervising and send the worker SIGTERM; returns at once (the server
        calls it as soon as it is told to exit, so both wind down together)."""
        with self._lock:
            self._stopping.set()
            proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """Stop supervising and end the worker: SIGTERM (it finishes or re-queues its
        runs), then SIGKILL to its whole process group."""
        self.begin_stop()
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("embedded worker did not stop in time; killing it")
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: pgid == pid
                except ProcessLookupError:
                    pass
                proc.wait()
        self._thread.join(timeout=STOP_TIMEOUT_S)


class ServerWithWorker(uvicorn.Server):
    """uvicorn's server, ending the embedded worker with it. uvicorn re-raises the signal
    that stopped it once it has shut down, and for SIGTERM that ends the process on the
    spot: code after ``run()`` never runs, which is how SIGTERM used to leave the worker
    and its fork server behind. So the worker is told to stop the moment the signal
    arrives (both wind down together) and is waited for before that re-raise."""

    def __init__(self, config: uvicorn.Config, worker: WorkerSupervisor | None):
        super().__init__(config)
        self.worker = worker

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.worker is not None:
            self.worker.begin_stop()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            try:
                yield
            finally:
                if self.worker is not None:
                    self.worker.stop()
